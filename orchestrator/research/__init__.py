"""The research tree's parts: a corpus (:mod:`.corpus`, :mod:`.sources`), its search and read
tools (:mod:`.tools`) and the offline model (:mod:`.offline`) that runs the tree without an LLM.

An application of the library: it uses the public API and is never imported by the runtime.
"""

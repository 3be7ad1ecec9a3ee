"""The research tree's parts: a corpus (:mod:`.corpus`, with :mod:`.sources`, :mod:`.ranking`,
:mod:`.index_file` and :mod:`.results`), its search and read tools (:mod:`.tools`) and the offline
model (:mod:`.offline`, with :mod:`.questions`, :mod:`.passages` and :mod:`.arguments`) that runs
the tree without an LLM.

An application of the library: it uses the public API and is never imported by the runtime.
"""

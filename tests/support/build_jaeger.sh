#!/usr/bin/env bash
# Builds Jaeger v1.75.0 (the same commit as v2.12.0) from the Go module proxy into a cache folder,
# once: a small module of its own pins the version as a tool (`go install pkg@version` refuses the
# module's replace directive), then `go build` writes the binary. Prints the binary's path.
# Usage: build_jaeger.sh [CACHE_DIR]  (default $ORCHESTRATOR_JAEGER_CACHE or
# ~/.cache/orchestrator-tests/jaeger). Fails when Go is missing.
set -euo pipefail
version=v1.75.0
cache="${1:-${ORCHESTRATOR_JAEGER_CACHE:-$HOME/.cache/orchestrator-tests/jaeger}}"
binary="$cache/jaeger-$version"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi
if ! command -v go >/dev/null; then
  echo "building Jaeger needs Go (https://go.dev/dl/; 1.24 or newer)" >&2
  exit 1
fi
module="$cache/module-$version"
mkdir -p "$module"
cd "$module"
if [ ! -f go.mod ]; then
  go mod init orchestrator-tests/jaeger >/dev/null 2>&1
fi
go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version" >&2
# Build to a temporary name and rename, so an interrupted build never leaves a broken binary.
go build -o "$binary.partial" github.com/jaegertracing/jaeger/cmd/jaeger >&2
mv "$binary.partial" "$binary"
echo "$binary"

#!/usr/bin/env bash
# Regenerates internal/wire/pulsarpb/*.pb.go from our .proto description.
#
#   scripts/gen-proto.sh          regenerate in place
#   scripts/gen-proto.sh --check  regenerate into a temp dir; fail if the checked-in code differs
#
# protoc-gen-go is pinned to the google.golang.org/protobuf version in go.mod and installed into
# GOPATH/bin if missing or of another version, so the output is reproducible.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

command -v protoc >/dev/null 2>&1 || { echo "protoc not found (apt-get install -y protobuf-compiler)" >&2; exit 1; }

want=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
gobin=$(go env GOBIN); [ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
plugin="$gobin/protoc-gen-go"
if [ ! -x "$plugin" ] || [ "$("$plugin" --version 2>/dev/null | awk '{print $2}')" != "$want" ]; then
  echo "installing protoc-gen-go $want" >&2
  GOFLAGS=-mod=mod go install "google.golang.org/protobuf/cmd/protoc-gen-go@$want"
fi

src=internal/wire/pulsarpb
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
protoc --plugin=protoc-gen-go="$plugin" -I "$src" \
  --go_out="$out" --go_opt=paths=source_relative \
  "$src"/*.proto
# The header names the protoc version; protoc versions differ between machines while the generated
# code (from protoc-gen-go) does not, so record a fixed string to keep --check portable.
for f in "$out"/*.pb.go; do
  sed -i -E 's|^// \tprotoc +v[0-9.]+$|// \tprotoc        (any)|' "$f"
done

if [ "$check" = 1 ]; then
  status=0
  for f in "$out"/*.pb.go; do
    name=$(basename "$f")
    if ! cmp -s "$f" "$src/$name"; then
      echo "generated code out of date: $src/$name (run scripts/gen-proto.sh)" >&2
      status=1
    fi
  done
  for f in "$src"/*.pb.go; do
    [ -e "$out/$(basename "$f")" ] || { echo "stale generated file: $f" >&2; status=1; }
  done
  exit $status
fi
cp "$out"/*.pb.go "$src"/

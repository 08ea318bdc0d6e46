#!/usr/bin/env bash
# The tiny end-to-end example (README.md here), run from the repository root: the commands
# between the README's `tiny` markers, as they are written there (--print: only list them).
set -euo pipefail
cd "$(dirname "$0")/../.."
LINES=$(sed -n '/--8<-- \[start:tiny\]/,/--8<-- \[end:tiny\]/p' examples/tiny_end_to_end/README.md \
  | sed -n '/^dvk /p' | sed 's/ \{2,\}#.*$//')
if [ "${1:-}" = "--print" ]; then
  printf '%s\n' "$LINES"
  exit 0
fi
while read -r line; do
  echo "+ $line" >&2
  eval "$line" </dev/null
done <<< "$LINES"

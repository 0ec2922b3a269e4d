#!/usr/bin/env bash
# expect.sh CODE REGEX CMD...: runs CMD, passes when it exits with CODE and its output matches REGEX.
code="$1"; regex="$2"; shift 2
out="$("$@" 2>&1)"; rc=$?
printf '%s\n' "$out" | tail -n 40
if [ "$rc" -ne "$code" ]; then echo "expect.sh: exit code $rc, wanted $code"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then echo "expect.sh: output does not match /$regex/"; exit 1; fi

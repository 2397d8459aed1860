#!/usr/bin/env bash
# Builds .venv-native (vLLM 0.33 CPU build, for the native late-chunking tests) unless it is built.
# Usage: native-venv.sh WHEELS_DIR PYTHON VENV
# Exit 0: the venv is ready. Exit 3: this machine cannot run the build (the wheels' install script
# said so with its exit status 3, or there are no wheels); one "SKIPPED native-path tests: ..." line
# is printed. Any other status: the set-up failed.
# The .installed stamp (sha256 of pyproject.toml) is written only after every step succeeded; a venv without it is rebuilt
# from scratch, so a half-built one is never mistaken for a good one.
set -uo pipefail
wheels=${1:-} py=${2:?python} venv=${3:?venv}
quiet() { sed -u '/^WARNING: Location/d'; }
if [ -z "$wheels" ] || [ ! -f "$wheels/install-vllm-0.33-cpu.sh" ]; then
    echo "SKIPPED native-path tests: no vLLM 0.33 CPU wheels on this machine (VLLM033_WHEELS: docs/testing.md)"
    exit 3
fi
# the stamp holds the sha256 of the pyproject.toml it was built from
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -f "$venv/.installed" ] && [ "$(cat "$venv/.installed")" = "$want" ]; then
    exit 0
fi
rm -rf "$venv"
set -e
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip 2>&1 | quiet
"$venv/bin/pip" install -q "torch==2.13.0" 2>&1 | quiet
"$venv/bin/pip" install -q -e ".[model,dev]" 2>&1 | quiet
set +e
log=$(mktemp)
bash "$wheels/install-vllm-0.33-cpu.sh" "$venv/bin/python" > >(quiet) 2> >(tee "$log" >&2)
status=$?
wait
if [ "$status" -eq 3 ]; then
    rm -rf "$venv"
    echo "SKIPPED native-path tests: the vLLM 0.33 CPU build cannot run on this CPU ($(tail -n 1 "$log"))"
    exit 3
fi
[ "$status" -eq 0 ] || { echo "native-path set-up failed (install script exit $status)" >&2; exit "$status"; }
echo "$want" > "$venv/.installed"

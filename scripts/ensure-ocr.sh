#!/usr/bin/env bash
# Tesseract for the OCR tests (tests/test_ocr.py): Debian's tesseract-ocr and its English data,
# installed with apt-get when missing. Where it cannot be installed (not root, no apt-get, no
# network), one line says so and the OCR tests skip; with LATECHUNK_REQUIRE_OCR=1 (.ci/run) that
# is an error instead. `make demo` does not need it.
set -uo pipefail

have_ocr() {
    command -v tesseract >/dev/null 2>&1 && tesseract --list-langs 2>/dev/null | grep -qx eng
}

if have_ocr; then
    exit 0
fi
why=""
if ! command -v apt-get >/dev/null 2>&1; then
    why="no apt-get on this machine"
elif [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
    why="not root and no password-less sudo"
else
    SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo -n")
    echo "installing tesseract-ocr tesseract-ocr-eng (apt-get) for tests/test_ocr.py"
    if $SUDO apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
        $SUDO apt-get install -y -qq --no-install-recommends tesseract-ocr tesseract-ocr-eng >/dev/null; then
        have_ocr && exit 0
        why="apt-get installed it, but tesseract --list-langs has no eng"
    else
        why="apt-get install tesseract-ocr tesseract-ocr-eng failed"
    fi
fi
if [ "${LATECHUNK_REQUIRE_OCR:-0}" = "1" ]; then
    echo "ensure-ocr: Tesseract is required (LATECHUNK_REQUIRE_OCR=1) but cannot be installed: $why" >&2
    exit 1
fi
echo "ensure-ocr: Tesseract not installed ($why): tests/test_ocr.py will skip"
exit 0

#!/usr/bin/env bash
# `make test`'s first step: the system tools some slow tests need, installed the way CI would, or
# named for a skip. tests/test_image.py builds the pipeline image (docker, or podman + runc +
# debootstrap); tests/test_report_page.py renders the run report in headless Chromium.
# As root with apt-get (a fresh Debian machine, CI) the missing ones are installed, in one line;
# elsewhere, or with LOCKSTEP_TEST_INSTALL=no, nothing is installed and those tests skip with the
# command that would enable them. Never fails the suite: a failed install also means a skip.
set -uo pipefail

missing=()
if ! { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
  for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
fi
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

wanted="apt-get install ${missing[*]}"
if [ "${LOCKSTEP_TEST_INSTALL:-yes}" = no ] || [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "make test: ${missing[*]} missing; the image and report tests will skip (to run them: $wanted)"
  exit 0
fi
echo "make test: installing ${missing[*]} (the image and report tests need them; LOCKSTEP_TEST_INSTALL=no skips those tests instead)"
start=$(date +%s)
if apt-get update -qq >/tmp/lockstep-test-tools.log 2>&1 \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >>/tmp/lockstep-test-tools.log 2>&1; then
  echo "make test: installed ${missing[*]} in $(($(date +%s) - start))s"
else
  echo "make test: could not install ${missing[*]} (/tmp/lockstep-test-tools.log); the image and report tests will skip"
fi
exit 0

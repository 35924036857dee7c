#!/usr/bin/env bash
# The HTML report of `shardc plan` on GPT-3 175B as headless Chromium renders
# it: after its script ran the page holds the memory chart, the live-bytes
# curve with its peak, a Gantt chart with bars and the class <select>; a link
# selects another class and a time window; a screenshot is taken
# ($BUILD_DIR/html-report.png).  Skipped (exit 77) when Chromium is not
# installed or cannot start here; the test never installs it
# (scripts/install-deps does).  The trace JSON and the page's self-containment
# are checked without a browser by tests/golden/trace.test.sh.
# Usage: html.test.sh SHARDC BUILD_DIR      (run from the repository root)
set -u
shardc=$1
build=${2:-.}
spec=specs/gpt3-175b.tspec
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

chromium=
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null; then chromium=$(command -v "$c"); break; fi
done
if [ -z "$chromium" ]; then
  echo "skipped: chromium is not installed (scripts/install-deps installs Debian's chromium)"
  exit 77
fi

# chrome ARGS...: headless Chromium with a fresh profile and nothing that
# reaches the network; its own log goes to $tmp/chromium.log.
chrome() {
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-quic \
    --user-data-dir="$(mktemp -d -p "$tmp")" "$@" 2>>"$tmp/chromium.log"
}

# Can it run at all here?  A failure on a trivial page is a skip, not a failure.
printf '<!DOCTYPE html><p id="probe">ok</p>\n' >"$tmp/probe.html"
if ! chrome --dump-dom "file://$tmp/probe.html" | grep -q 'id="probe"'; then
  echo "skipped: chromium is installed but cannot render a page here:"
  tail -n 5 "$tmp/chromium.log"
  exit 77
fi

fail=0
bad() { echo "FAIL: $*"; fail=1; }

if ! "$shardc" plan --help 2>&1 | grep -q -- '--html'; then
  echo "skipped: this shardc's plan command has no --trace/--html options (compiler/report.c)"
  exit 77
fi

"$shardc" plan "$spec" --html "$tmp/r.html" >"$tmp/plan.txt" 2>&1 && [ -s "$tmp/r.html" ] ||
  { cat "$tmp/plan.txt"; bad "shardc plan $spec --html wrote no page"; exit 1; }

# ---- the page as Chromium renders it --------------------------------------------------
# check_dom FILE WHAT [ID...]: the elements the script draws are there, and the IDs.
check_dom() {
  local dom=$1 what=$2 n
  shift 2
  for id in mem-chart mem-table live-chart live-curve gantt class-select class-info verdict summary "$@"; do
    grep -q "id=\"$id\"" "$dom" || bad "$what: no element #$id"
  done
  n=$(grep -o '<rect class="bar"' "$dom" | wc -l)
  [ "$n" -gt 100 ] || bad "$what: the Gantt chart has $n bars"
  n=$(grep -o '<option ' "$dom" | wc -l)
  [ "$n" = 16 ] || bad "$what: the class <select> has $n options, not 16"
  echo "$what: $(grep -o '<rect class="bar"' "$dom" | wc -l) Gantt bars drawn"
}
chrome --dump-dom "file://$tmp/r.html" >"$tmp/dom.html" || bad "chromium --dump-dom failed"
check_dom "$tmp/dom.html" "whole step" live-peak
grep -q 'id="class-info">stage 0 ' "$tmp/dom.html" || bad "the largest class (stage 0) is not shown first"
# a link can select another class and a time window (the <select> and zoom path)
chrome --dump-dom "file://$tmp/r.html#class=5&from=1000000&to=1500000" >"$tmp/dom5.html" ||
  bad "chromium --dump-dom (class 5) failed"
check_dom "$tmp/dom5.html" "class 5 zoomed"
grep -q 'id="class-info">stage 5 (ranks' "$tmp/dom5.html" || bad "#class=5 did not select stage 5"

chrome --screenshot="$tmp/shot.png" --window-size=1400,1800 "file://$tmp/r.html" >/dev/null ||
  bad "chromium --screenshot failed"
shot=$(wc -c <"$tmp/shot.png" 2>/dev/null || echo 0)
[ "$shot" -gt 60000 ] || bad "the screenshot is $shot bytes: the page looks empty"
cp "$tmp/shot.png" "$build/html-report.png" 2>/dev/null && echo "screenshot: $build/html-report.png ($shot bytes)"

[ $fail = 0 ] && echo "ok: the HTML report of $spec as Chromium renders it"
exit $fail

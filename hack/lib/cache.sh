# shellcheck shell=bash
# Sourced by the hack/ scripts that build or fetch one pinned thing: each does it once, into a
# directory of ${KFED_CACHE_DIR:-~/.cache/kfed} whose name carries the pinned versions, and marks
# that directory complete with a stamp file, so that an interrupted build is never reused.

# cache_dir NAME: the cache directory called NAME.
cache_dir() {
  echo "${KFED_CACHE_DIR:-$HOME/.cache/kfed}/$1"
}

# reuse_if_complete DIR [PRINT]: when DIR was completed before, print PRINT (DIR by default) and exit.
reuse_if_complete() {
  if [[ -f "$1/.complete" ]]; then
    echo "${2:-$1}"
    exit 0
  fi
}

# require_go TASK [MORE]: stop, saying that go is required to TASK, when go is not installed.
require_go() {
  command -v go >/dev/null || { echo "go is required to $1 (https://go.dev/dl)${2:-}" >&2; exit 1; }
}

# start_build MESSAGE: say what is built, and start the clock finish_build reads.
start_build() {
  build_started=$(date +%s)
  echo "$1" >&2
}

# cached_build NAME TASK WHAT: set `out` to the cache directory NAME. When it is complete, print
# it and exit; otherwise (go being there to TASK) say WHAT is built and start in it, empty.
cached_build() {
  out=$(cache_dir "$1")
  reuse_if_complete "$out"
  require_go "$2"
  rm -rf "$out"
  mkdir -p "$out"
  start_build "$3 into $out (first build takes several minutes)"
}

# finish_build DIR [PRINT] [SIZED]: say how long the build took (and the size of SIZED when given),
# then mark DIR complete and print PRINT (DIR by default).
finish_build() {
  local size=""
  if [[ -n "${3:-}" ]]; then
    size="; size: $(du -sh "$3" | cut -f1)"
  fi
  echo "built in $(( $(date +%s) - build_started ))s${size}" >&2
  mark_complete "$1" "${2:-$1}"
}

# mark_complete DIR [PRINT]: mark DIR complete and print PRINT (DIR by default).
mark_complete() {
  touch "$1/.complete"
  echo "${2:-$1}"
}

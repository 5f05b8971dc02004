# Sourced by the command-line test scripts; needs $merak and $work set.
#
# expect_error REGEX ARGS...: `merak ARGS...` must exit with 1..127 (an
# error, not a signal), print to stderr a line matching REGEX, and show no
# sign of a crash.
expect_error() {
  local regex=$1
  shift
  set +e
  "$merak" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  if ((rc == 0 || rc >= 128)); then
    echo "FAIL: exit code $rc for: merak $*"
    cat "$work/err"
    exit 1
  fi
  if ! grep -Eq -- "$regex" "$work/err"; then
    echo "FAIL: stderr does not match /$regex/ for: merak $*"
    cat "$work/err"
    exit 1
  fi
  if grep -Eq "terminate called|Aborted|Segmentation|unexpected error" "$work/err"; then
    echo "FAIL: crash-like output for: merak $*"
    cat "$work/err"
    exit 1
  fi
  echo "ok (exit $rc): $(head -n 1 "$work/err")"
}

# Shared by the enclave-train CLI test scripts (sourced after they set $T, their scratch
# directory): fail, expect_rc and the keystore passphrase on fd 3.
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() {  # expect_rc CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" = "$want" ] || { cat "$T/err" >&2; fail "$what: exit $rc, want $want"; }
}
PASS="correct horse battery staple"
pass() { exec 3<<<"$PASS"; }

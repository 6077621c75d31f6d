# Shared set-up for scripts/test.sh and scripts/demo.sh: one place that knows
# how to get Debian packages and the project's virtualenv onto a fresh machine.

# ensure_debian_packages PKG:FILE ...  installs PKG when FILE is missing.
ensure_debian_packages() {
  local missing=() spec
  for spec in "$@"; do
    [ -e "${spec#*:}" ] || missing+=("${spec%%:*}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing Debian packages: ${missing[*]}" >&2
  # The tests start their own sshd, slurmd, slurmctld and munged; the machine's services stay as they were:
  # a policy-rc.d (unless the machine has one) keeps the packages' services from starting now, and the units
  # the install enables at boot are disabled again.
  local policy=/usr/sbin/policy-rc.d made_policy="" enabled_before status=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy" && made_policy=1
  fi
  enabled_before="$(_enabled_units)"
  $sudo apt-get update -qq || status=$?
  [ "$status" -ne 0 ] || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2 || status=$?
  [ -z "$made_policy" ] || $sudo rm -f "$policy"
  local unit
  for unit in $(comm -13 <(printf '%s\n' "$enabled_before") <(_enabled_units)); do
    echo "disabling $unit at boot (enabled by the install; the tests start their own)" >&2
    $sudo systemctl disable -q "$unit" >&2 || echo "warning: could not disable $unit" >&2
  done
  return "$status"
}

# _enabled_units  the systemd units enabled at boot, sorted (nothing where there is no systemctl).
_enabled_units() {
  command -v systemctl >/dev/null || return 0
  { systemctl list-unit-files --state=enabled --no-legend 2>/dev/null || true; } | awk '{print $1}' | sort
}

# ensure_venv EXTRAS  creates .venv and installs dlaunch[EXTRAS] into it,
# skipping pip when setup.cfg has not changed since the last install.
ensure_venv() {
  local extras="$1" python="${PYTHON:-python3}"
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  local stamp=".venv/.dlaunch-installed-$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)-${extras//,/_}"
  if [ ! -e "$stamp" ]; then
    echo "installing dlaunch[$extras] into .venv" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat -e ".[$extras]" >&2
    touch "$stamp"
  fi
}

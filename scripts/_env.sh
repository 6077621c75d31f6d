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
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
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

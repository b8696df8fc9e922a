# The system packages Keymux's commands need, in one list, and the one way they are installed.
# Sourced by scripts/run, scripts/test and (through scripts/test) .ci/run, so the three cannot drift.
#
#   need_packages PURPOSE...   PURPOSE: node, build, tray, test, perf
#
# Debian and Ubuntu (apt) only. A missing package is installed with apt-get (with sudo when not root),
# after asking on the terminal; KEYMUX_YES=1 (set by --yes) skips the question. Without a terminal,
# root installs at once (CI) and anyone else needs --yes. Where installing is impossible (no apt, no
# sudo, the user says no) it prints the exact command to run and exits 1 before anything is built.

# Node.js builds the dashboard (ui/); Debian 12's nodejs is 18, which is enough.
KEYMUX_PACKAGES_node=(nodejs npm)
# Every Rust build: a C compiler and linker (rustc links with `cc`; a few crates compile C).
KEYMUX_PACKAGES_build=(build-essential pkg-config)
# The tray app (Tauri v2): WebKitGTK, appindicator and what their build scripts run.
KEYMUX_PACKAGES_tray=(file libwebkit2gtk-4.1-dev libxdo-dev libssl-dev libayatana-appindicator3-dev librsvg2-dev)
# The tests: a real Secret Service (gnome-keyring in a private D-Bus session), Chromium for the
# dashboard's browser test, and for the tray app's tests an X server, a tray host (tint2) and the
# tools that find, click and type into its windows (xdotool, xwininfo from x11-utils); tmux, the
# terminal the real Codex TUI runs in; iproute2, to bring up the loopback interface of the private
# network namespace the tests run in.
KEYMUX_PACKAGES_test=(dbus-x11 gnome-keyring libsecret-tools chromium xvfb xauth tint2 xdotool x11-utils tmux iproute2)
# The request path's instruction-count gate (scripts/perf-gate, which `scripts/test --full` runs):
# valgrind's callgrind and callgrind_control.
KEYMUX_PACKAGES_perf=(valgrind)

# Whether a Debian package is installed.
keymux_has_package() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

need_packages() {
  local purpose missing=() list
  for purpose in "$@"; do
    list="KEYMUX_PACKAGES_${purpose}[@]"
    for p in "${!list}"; do
      # Node.js may come from elsewhere (nvm, NodeSource, the official tarball): a working node and npm
      # on PATH is enough.
      if [ "$purpose" = node ] && command -v node >/dev/null && command -v npm >/dev/null; then
        continue
      fi
      # The browser test takes any Chromium named by CHROMIUM (Ubuntu ships it as a snap).
      if [ "$p" = chromium ] && [ -n "${CHROMIUM:-}" ] && [ -x "$CHROMIUM" ]; then
        continue
      fi
      if command -v dpkg-query >/dev/null && keymux_has_package "$p"; then
        continue
      fi
      missing+=("$p")
    done
  done
  ((${#missing[@]})) || return 0
  local cmd="apt-get install -y --no-install-recommends ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "Keymux needs these Debian/Ubuntu packages (or your system's equivalents): ${missing[*]}" >&2
    echo "This system has no apt-get: install them with its package manager, then run this again." >&2
    exit 1
  fi
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "Keymux needs: ${missing[*]}. Run as root: apt-get update && $cmd" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "Keymux needs these system packages: ${missing[*]}"
  if [ "${KEYMUX_YES:-}" != 1 ]; then
    if [ -t 0 ]; then
      local answer
      read -r -p "Install them now with ${sudo[*]:+sudo }apt-get? [Y/n] " answer
      case "$answer" in
        "" | y | Y | yes) ;;
        *)
          echo "Nothing installed. Run: ${sudo[*]:+sudo }apt-get update && ${sudo[*]:+sudo }$cmd" >&2
          exit 1
          ;;
      esac
    elif ((${#sudo[@]})); then
      # No terminal to ask on (and none for sudo's password): only an explicit --yes installs.
      echo "No terminal to ask on. Run: sudo apt-get update && sudo $cmd   (or pass --yes)" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get update -qq || ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    echo "Installing failed. Run: ${sudo[*]:+sudo }apt-get update && ${sudo[*]:+sudo }$cmd" >&2
    exit 1
  fi
}

# Reads --yes (sets KEYMUX_YES=1) out of the arguments; the rest are left in KEYMUX_ARGS.
take_yes() {
  KEYMUX_ARGS=()
  for a in "$@"; do
    case "$a" in
      --yes | -y) export KEYMUX_YES=1 ;;
      *) KEYMUX_ARGS+=("$a") ;;
    esac
  done
}

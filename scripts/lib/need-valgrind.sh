# Sourced by the scripts that run under valgrind (scripts/callgrind.sh,
# scripts/callgrind-clients.sh): makes sure valgrind is installed. As root
# on Debian it installs Debian's package; otherwise it says how and exits 2.
if ! command -v valgrind > /dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
    echo "valgrind not found: installing Debian's package" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind > /dev/null
  else
    echo "valgrind not found: install it (Debian/Ubuntu: sudo apt-get install valgrind) and rerun" >&2
    exit 2
  fi
fi

# The common start of the shell tests run as `TEST.sh PARTRAIN SOURCE_DIR SITE_CONFIG`:
# sourced (with the test's own arguments), it sets $partrain and $src, exports the site config
# and one thread per process, makes a scratch folder $work removed at exit, and defines fail.
partrain=$1 src=$2
export PARTRAIN_SITE_CONFIG=$3 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

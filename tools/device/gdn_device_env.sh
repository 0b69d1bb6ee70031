# Sourced by the gdn device scripts (gdn_pieces.sh, gdn_s8_sass.sh) from the repository root, after they set `out`
# (their log folder) and `limit` (their time limit in seconds). Defines el (an echo stamped with the seconds since
# the start) and left (seconds left of the limit), creates $out, installs the carried FLA wheels (.whl/*.whl) into
# /tmp/site and unpacks build-gdn/dev/triton_cache.tgz into the Triton cache when it was carried.
t0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( limit - ($(date +%s) - t0) )); }
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
export TRITON_CACHE_DIR=/tmp/tcache FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONUNBUFFERED=1
mkdir -p "$TRITON_CACHE_DIR"
[ -f build-gdn/dev/triton_cache.tgz ] && tar -C "$TRITON_CACHE_DIR" -xzf build-gdn/dev/triton_cache.tgz

# What the shell benchmarks (bench/*.sh) check and make before they run.
# Source it:
#
#   source testing/shell/bench_data.sh
#   bench_require "$BUILD" server/batchd client/batchd-client
#   bench_dataset "$BUILD" "$DATA" "$IMAGES"
#
# bench_require exits naming the first program BUILD lacks. bench_dataset
# writes IMAGES ImageNet-like JPEGs in 10 classes to DATA with
# make_dataset, once: DATA/.complete marks a finished dataset, which later
# runs reuse.

bench_require() {
  local build=$1 program
  shift
  for program in "$@"; do
    [ -x "$build/$program" ] ||
      { echo "error: $build/$program not found; build it first" >&2; exit 1; }
  done
}

bench_dataset() {
  local build=$1 data=$2 images=$3
  [ -f "$data/.complete" ] && return 0
  "$build/tools/make_dataset" --out "$data" --images "$images" --classes 10 --seed 1
  touch "$data/.complete"
}

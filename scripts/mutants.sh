#!/usr/bin/env bash
# Mutation testing with cargo-mutants: plants small bugs, one at a time, in the code that keeps
# principals apart, confines paths, enforces limits, fences leases and assigns `seq`, and runs
# the tests that cover that code against each. A mutant no test catches is a hole a real
# regression could walk through: kill it with a test, or say in docs/testing.md why it is
# equivalent. Too slow for CI on two cores; run it by hand after changing these files.
#
#   scripts/mutants.sh                      # every set
#   scripts/mutants.sh limits confinement   # some sets (see SETS below)
#   MUTANTS_RE=RateLimiter scripts/mutants.sh limits   # only mutants whose names match
#   MUTANTS_TARGETS=--lib MUTANTS_TESTS=limits:: scripts/mutants.sh limits   # only these tests
#
# The fence and seq sets need PostgreSQL (AGENTMUX_TEST_PG_URL; scripts/pg.sh starts
# one): without it their PostgreSQL tests would pass by skipping and every mutant would look
# missed, so they refuse to run. Results go to mutants.out/<set>/ (git-ignored); the summary of
# the last run is docs/mutants-result.md.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-mutants >/dev/null 2>&1 || cargo install cargo-mutants --locked

# Each set: its name, the files mutated, an optional filter of the mutants' names (it may hold
# `|`), the test targets built and run against each mutant, and the tests' name filters.
SETS=(
  "isolation|src/http/rest/sessions.rs src/http/rest/schedules.rs src/http/rest/projects.rs src/http/sse.rs src/session/activity.rs||--test it|isolation:: security:: activity:: schedules::"
  "confinement|src/projects.rs||--lib --test it|projects::"
  "limits|src/limits.rs src/http/ws/mod.rs|RateLimiter|Quota|within_rate|configure|--lib --test it|limits::"
  "fence|src/store/leases.rs src/store/postgres/mod.rs src/store/postgres/writer.rs|Leases::|PgStore::append|flush|--test it|store::a_node_that_lost store::an_earlier_run cluster::a_stalled"
  "seq|src/store/batch.rs src/store/writer.rs||--test it|store::seqs_are store::only_the_running store::rewind store::forks_and_imports history::"
)
NEEDS_PG="fence seq"

run_set() {
  local name="$1" files="$2" re="$3" targets="$4" tests="$5"
  # In place (one mutant at a time, in this tree and its target/): a copy would rebuild every
  # dependency first. Don't edit the tree while it runs; it is restored after each mutant.
  local args=(--in-place --no-shuffle --baseline "${MUTANTS_BASELINE:-run}"
              --timeout "${MUTANTS_TIMEOUT:-600}" --build-timeout "${MUTANTS_BUILD_TIMEOUT:-1200}"
              --output "mutants.out/$name")
  for f in $files; do args+=(--file "$f"); done
  # The targets go to every cargo command (the build too), so only they are built.
  targets="${MUTANTS_TARGETS:-$targets}"
  for t in $targets; do args+=("--cargo-arg=$t"); done
  re="${MUTANTS_RE:-$re}"
  tests="${MUTANTS_TESTS:-$tests}"
  [ -n "$re" ] && args+=(--re "$re")
  if [[ " $NEEDS_PG " == *" $name "* ]] && [ -z "${AGENTMUX_TEST_PG_URL:-}" ]; then
    echo "error: set $name needs PostgreSQL (AGENTMUX_TEST_PG_URL)" >&2
    return 1
  fi
  echo "== mutants: $name"
  mkdir -p "mutants.out/$name"
  # shellcheck disable=SC2086 # the test selection is a list of words
  local code=0
  cargo mutants "${args[@]}" -- -- $tests || code=$?
  # 2: some mutants were missed, 3: some timed out; anything else but 0 is a failed run.
  case "$code" in 0|2|3) ;; *) echo "error: cargo mutants failed ($code)" >&2; return "$code" ;; esac
  echo "-- $name: missed"
  cat "mutants.out/$name/mutants.out/missed.txt" 2>/dev/null || true
}

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(isolation confinement limits fence seq)
for set in "${SETS[@]}"; do
  IFS='|' read -r -a parts <<<"$set"
  name="${parts[0]}" files="${parts[1]}" targets="${parts[-2]}" tests="${parts[-1]}"
  # The name filter is everything between the files and the targets.
  re=$(IFS='|'; echo "${parts[*]:2:${#parts[@]}-4}")
  for w in "${wanted[@]}"; do
    if [ "$w" = "$name" ]; then run_set "$name" "$files" "$re" "$targets" "$tests"; fi
  done
done

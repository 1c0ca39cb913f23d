// The chaos worker's port of plan.rs: SplitMix64 with wrapping 64-bit
// arithmetic and the plan table, against values worked out from the Rust
// (the chaos run's outcome_vs_handler check is the end-to-end proof).

import { test } from "node:test";
import assert from "node:assert/strict";
import { FATAL_MESSAGE, failureOn, mix, plan, type Plan } from "../tools/chaos-plan.js";

const U64_MAX = (1n << 64n) - 1n;

test("mix is SplitMix64's finalizer, wrapping at 64 bits", () => {
  // The first two outputs of the SplitMix64 generator seeded 0 (state advances by the golden gamma before mixing).
  assert.equal(mix(0n), 0xe220a8397b1dcdafn);
  assert.equal(mix(0x9e3779b97f4a7c15n), 0x6e789e6aa1b965f4n);
  // The first add overflows.
  assert.equal(mix(U64_MAX), 0xe4d971771b652c20n);
});

test("plans of known jobs", () => {
  const ok = (sleepMs: number): Plan => ({ kind: "ok", sleepMs });
  assert.deepEqual(
    [0n, 1n, 2n, 3n, 4n, 5n, 6n, 7n].map((n) => plan(1n, n)),
    [
      { kind: "always_retry" },
      { kind: "flaky", fails: 2, retryAfterMs: undefined },
      ok(9),
      ok(21),
      ok(21),
      { kind: "snooze_in_process", delayMs: 49 },
      { kind: "snooze_queue", delayMs: 303 },
      ok(7),
    ],
  );
  // One of each arm, seed 7.
  assert.deepEqual(plan(7n, 1n), ok(124));
  assert.deepEqual(plan(7n, 4n), { kind: "snooze_queue", delayMs: 534 });
  assert.deepEqual(plan(7n, 11n), { kind: "slow", sleepMs: 3222 });
  assert.deepEqual(plan(7n, 23n), { kind: "flaky", fails: 2, retryAfterMs: 203 });
  assert.deepEqual(plan(7n, 24n), { kind: "fatal" });
  assert.deepEqual(plan(7n, 27n), { kind: "snooze_in_process", delayMs: 29 });
  assert.deepEqual(plan(7n, 38n), { kind: "always_retry" });
  assert.deepEqual(plan(1n, 13n), { kind: "flaky", fails: 1, retryAfterMs: 244 });
  // Seeds and numbers at the top of u64 (n + 0x5eed wraps).
  assert.deepEqual(plan(U64_MAX, U64_MAX), { kind: "slow", sleepMs: 2715 });
  assert.deepEqual(plan(U64_MAX, 24n), { kind: "flaky", fails: 1, retryAfterMs: 220 });
  assert.deepEqual(plan(12345678901234567890n, 99999n), ok(19));
});

test("the mix of plans over 10 000 jobs", () => {
  const counts = new Map<string, number>();
  for (let n = 0n; n < 10_000n; n++) {
    const k = plan(7n, n).kind;
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  assert.deepEqual(Object.fromEntries([...counts].sort()), {
    always_retry: 295,
    fatal: 281,
    flaky: 1200,
    ok: 6381,
    slow: 147,
    snooze_in_process: 675,
    snooze_queue: 1021,
  });
});

test("failures follow the plan, with the exact messages", () => {
  const flaky: Plan = { kind: "flaky", fails: 2, retryAfterMs: undefined };
  assert.deepEqual(failureOn(flaky, 2), { fatal: false, message: "chaos: planned failure on attempt 2" });
  assert.equal(failureOn(flaky, 3), undefined);
  assert.deepEqual(failureOn({ kind: "always_retry" }, 3), { fatal: false, message: "chaos: planned failure on attempt 3" });
  assert.deepEqual(failureOn({ kind: "fatal" }, 4), { fatal: true, message: FATAL_MESSAGE });
  assert.equal(FATAL_MESSAGE, "chaos: planned fatal failure");
  assert.equal(failureOn({ kind: "ok", sleepMs: 0 }, 1), undefined);
  assert.equal(failureOn({ kind: "snooze_queue", delayMs: 300 }, 1), undefined);
});

// What every chaos job does: a port of crates/tether-chaos/src/plan.rs,
// decided by the run's seed and the job's number alone, so that this worker
// and the Rust checker agree without talking. SplitMix64 needs wrapping
// 64-bit arithmetic: BigInt, masked to 64 bits after every add and multiply.

const MASK = (1n << 64n) - 1n;

/** SplitMix64's finalizer (plan.rs `mix`). */
export function mix(x: bigint): bigint {
  x = (x + 0x9e3779b97f4a7c15n) & MASK;
  x = ((x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  x = ((x ^ (x >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return x ^ (x >> 31n);
}

/** What a job's handler does (plan.rs `Plan`). */
export type Plan =
  | { kind: "ok"; sleepMs: number }
  | { kind: "flaky"; fails: number; retryAfterMs: number | undefined }
  | { kind: "always_retry" }
  | { kind: "fatal" }
  | { kind: "snooze_queue"; delayMs: number }
  | { kind: "snooze_in_process"; delayMs: number }
  | { kind: "slow"; sleepMs: number };

/** The plan of job `n` in a run seeded `seed` (both u64). */
export function plan(seed: bigint, n: bigint): Plan {
  const h = mix((seed & MASK) ^ mix((n + 0x5eedn) & MASK));
  // Both below 1000: exact as numbers.
  const roll = Number(h % 1000n);
  const r = Number((h >> 16n) % 1000n);
  if (roll <= 549) return { kind: "ok", sleepMs: r % 25 };
  if (roll <= 669) return { kind: "flaky", fails: 1 + (r % 2), retryAfterMs: r % 3 === 0 ? 150 + (r % 100) : undefined };
  if (roll <= 699) return { kind: "always_retry" };
  if (roll <= 729) return { kind: "fatal" };
  if (roll <= 829) return { kind: "snooze_queue", delayMs: 300 + (r % 500) };
  if (roll <= 899) return { kind: "snooze_in_process", delayMs: 20 + (r % 60) };
  if (roll <= 914) return { kind: "slow", sleepMs: 2_600 + (r % 900) };
  return { kind: "ok", sleepMs: 100 + (r % 200) };
}

/** The message of a planned fatal failure. */
export const FATAL_MESSAGE = "chaos: planned fatal failure";

/** The message of a planned retryable failure. */
export function retryMessage(attempt: number): string {
  return `chaos: planned failure on attempt ${attempt}`;
}

/** How the handler fails `attempt`, or undefined when it does not (plan.rs `failure_on`). */
export function failureOn(p: Plan, attempt: number): { fatal: boolean; message: string } | undefined {
  if (p.kind === "flaky" && attempt <= p.fails) return { fatal: false, message: retryMessage(attempt) };
  if (p.kind === "always_retry") return { fatal: false, message: retryMessage(attempt) };
  if (p.kind === "fatal") return { fatal: true, message: FATAL_MESSAGE };
  return undefined;
}

//! The checks of each job's row and history: ownership, fencing, keys,
//! and what the clients were told.

use super::*;

/// Nothing lost, no key with two jobs, every submission acknowledged.
pub(super) fn check_keys(
    f: &mut Findings,
    jobs: &[JobRow],
    by_id: &HashMap<Uuid, &JobRow>,
    obs: &Obs,
    cx: &Context,
) {
    for (key, acks) in &obs.acks {
        let ids: HashSet<Uuid> = acks.iter().map(|a| a.0).collect();
        if ids.len() > 1 {
            f.flag("key_two_jobs", || {
                format!("key {key} acknowledged as jobs {ids:?}")
            });
        }
        let created = acks.iter().filter(|a| a.1).count();
        if created > 1 {
            f.flag("key_two_jobs", || {
                format!("key {key} answered created=true {created} times")
            });
        }
        if acks.len() > 1 {
            f.stats.keys_acked_repeatedly += 1;
        }
        for id in ids {
            match by_id.get(&id) {
                None => f.flag("lost", || {
                    format!("job {id} (key {key}) was acknowledged but is not in the database")
                }),
                Some(j) if j.key.as_deref() != Some(key) => f.flag("lost", || {
                    format!(
                        "job {id} was acknowledged for key {key} but holds key {:?}",
                        j.key
                    )
                }),
                Some(_) => {}
            }
        }
    }
    for n in 0..cx.jobs {
        let key = plan::key(n);
        if !obs.acks.contains_key(&key) {
            f.flag("not_acknowledged", || {
                format!("key {key} was never acknowledged to its producer")
            });
        }
    }
    let mut per_key: HashMap<&str, u32> = HashMap::new();
    for j in jobs {
        match j.key.as_deref() {
            Some(k) => {
                let c = per_key.entry(k).or_insert(0);
                *c += 1;
                if *c == 2 {
                    f.flag("key_two_jobs", || {
                        format!("key {k} holds two jobs in the database")
                    });
                }
                if !obs.acks.contains_key(k) {
                    f.flag("unacknowledged_job", || {
                        format!("job {} (key {k}) exists but no producer was told so", j.id)
                    });
                }
            }
            None => f.flag("unacknowledged_job", || {
                format!("job {} has no idempotency key", j.id)
            }),
        }
    }
}

/// The history of one job, replayed.
pub(super) fn check_job(f: &mut Findings, job: &JobRow, h: &[&EventRow], cx: &Context) {
    let id = job.id;
    let p = job.n.map(|n| plan::plan(cx.seed, n as u64));
    let mut state = "none";
    let (mut claims, mut snoozes, mut enqueued) = (0u64, 0u64, 0u64);
    let mut succeeded: Vec<&EventRow> = Vec::new();
    for e in h {
        let ev = e.event.as_str();
        let terminal = matches!(state, "succeeded" | "failed" | "cancelled");
        if terminal && !matches!(ev, "lease_lost" | "cancel_requested") {
            f.flag("history_mismatch", || {
                format!("job {id}: {ev} (seq {}) after it was {state}", e.seq)
            });
        }
        match ev {
            "enqueued" => {
                enqueued += 1;
                // A job with dependencies is `waiting` or, when they had
                // all ended as its rule needs, `queued` at once: the
                // history does not say which (no event for the second).
                state = if job.depends_on.is_empty() {
                    "queued"
                } else {
                    "pending"
                };
            }
            "released" => {
                if !matches!(state, "pending" | "waiting") {
                    f.flag("history_mismatch", || {
                        format!("job {id}: released (seq {}) while {state}", e.seq)
                    });
                }
                state = "queued";
            }
            "claimed" => {
                claims += 1;
                f.stats.claims += 1;
                let expected = claims as i64 - snoozes as i64;
                if i64::from(e.attempt) != expected {
                    f.flag("history_mismatch", || {
                        format!("job {id}: claim (seq {}) at attempt {}, but claims − snoozes = {expected}", e.seq, e.attempt)
                    });
                }
                if e.attempt > job.max_attempts {
                    f.flag("too_many_claims", || {
                        format!(
                            "job {id}: claimed for attempt {} of {}",
                            e.attempt, job.max_attempts
                        )
                    });
                }
                // From `pending`: queued at enqueue (`dependency_order`
                // proves its dependencies had ended).
                if !matches!(state, "queued" | "pending") {
                    f.flag("history_mismatch", || {
                        format!("job {id}: claimed (seq {}) while {state}", e.seq)
                    });
                }
                state = "running";
            }
            "snoozed" => {
                snoozes += 1;
                f.stats.snoozes += 1;
                state = "queued";
            }
            "retry_scheduled" | "failed" => {
                if ev == "retry_scheduled" {
                    f.stats.retries += 1;
                }
                state = if ev == "failed" { "failed" } else { "queued" };
                if let Some(p) = p {
                    let detail = e.detail.as_deref().unwrap_or_default();
                    match p.failure_on(e.attempt) {
                        Some((fatal, msg)) if msg == detail => {
                            let exhausted = e.attempt >= job.max_attempts;
                            let should_fail = fatal || exhausted;
                            if should_fail != (ev == "failed") {
                                f.flag("outcome_vs_handler", || {
                                    format!("job {id}: {ev} at attempt {} of {} after a {} failure", e.attempt, job.max_attempts, if fatal { "fatal" } else { "retryable" })
                                });
                            }
                            if ev == "failed" {
                                *f.stats.failed_by.entry(if fatal { "fatal" } else { "exhausted" }).or_insert(0) += 1;
                            }
                        }
                        _ => f.flag("outcome_vs_handler", || {
                            format!("job {id} ({p:?}): {ev} at attempt {} with {detail:?}, which its handler never answers", e.attempt)
                        }),
                    }
                }
            }
            "succeeded" => {
                succeeded.push(e);
                state = "succeeded";
                if let Some(p) = p {
                    if p.failure_on(e.attempt).is_some() {
                        f.flag("outcome_vs_handler", || {
                            format!("job {id} ({p:?}): succeeded at attempt {}, which its handler fails", e.attempt)
                        });
                    }
                }
            }
            "lease_expired" => {
                let outcome = e.detail.as_deref().unwrap_or("?");
                *f.stats.lease_expired.entry(outcome.to_owned()).or_insert(0) += 1;
                match outcome {
                    "queued" if e.attempt < job.max_attempts => state = "queued",
                    "queued" => {
                        f.flag("too_many_claims", || {
                            format!(
                                "job {id}: the reaper requeued it at attempt {} of {}",
                                e.attempt, job.max_attempts
                            )
                        });
                        state = "queued";
                    }
                    "failed" => {
                        *f.stats.failed_by.entry("reaped").or_insert(0) += 1;
                        state = "failed";
                    }
                    other => {
                        state = "cancelled";
                        f.flag("outcome_vs_handler", || {
                            format!("job {id}: reaped to {other}")
                        });
                    }
                }
            }
            "lease_lost" => {
                let op = e.detail.clone().unwrap_or_else(|| "?".to_owned());
                *f.stats.lease_lost.entry(op.clone()).or_insert(0) += 1;
                // Which token was presented is not recorded; the strongest
                // history-only proof that it was superseded: some claim
                // happened, and either the job no longer runs (its last
                // claim ended) or it runs under a later claim than another.
                if claims == 0 || (state == "running" && claims == 1) {
                    f.flag("lease_lost_not_superseded", || {
                        format!("job {id}: lease_lost ({op}, seq {}) while the only token ever minted ({claims} claims) still owned it ({state})", e.seq)
                    });
                }
            }
            "cancelled" => {
                // A dependency's failure cancels a waiting job (its
                // cause is judged by `dependency_cancel`); nobody else
                // cancels.
                if dependency_cancel(e).is_some() {
                    if !matches!(state, "pending" | "waiting") {
                        f.flag("dependency_cancel", || {
                            format!(
                                "job {id}: cancelled by a dependency (seq {}) while {state}",
                                e.seq
                            )
                        });
                    }
                } else {
                    f.flag("outcome_vs_handler", || {
                        format!("job {id}: cancelled, though nobody cancels")
                    });
                }
                state = "cancelled";
            }
            "cancel_requested" => {}
            other => f.flag("history_mismatch", || {
                format!("job {id}: unexpected event {other}")
            }),
        }
    }
    f.stats.max_claims = f.stats.max_claims.max(claims);
    *f.stats.states.entry(job.state.clone()).or_insert(0) += 1;
    if enqueued != 1 {
        f.flag("history_mismatch", || {
            format!("job {id}: {enqueued} enqueued events")
        });
    }
    if succeeded.len() > 1 {
        f.flag("double_completion", || {
            format!("job {id}: {} accepted completions", succeeded.len())
        });
    }
    let pending = state == "pending" && matches!(job.state.as_str(), "waiting" | "queued");
    if state != job.state && !pending {
        f.flag("history_mismatch", || {
            format!(
                "job {id}: the row says {}, its history says {state}",
                job.state
            )
        });
    }
    let spent = claims as i64 - snoozes as i64;
    if spent > i64::from(job.max_attempts) {
        f.flag("too_many_claims", || {
            format!(
                "job {id}: {claims} claims − {snoozes} snoozes > max_attempts {}",
                job.max_attempts
            )
        });
    }
    if i64::from(job.attempt) != spent {
        f.flag("history_mismatch", || {
            format!(
                "job {id}: attempt {} but claims − snoozes = {spent}",
                job.attempt
            )
        });
    }
    match job.state.as_str() {
        "succeeded" => {
            if let Some(e) = succeeded.last() {
                let by = job
                    .result
                    .as_ref()
                    .and_then(|r| r.get("by"))
                    .and_then(Value::as_str);
                let attempt = job
                    .result
                    .as_ref()
                    .and_then(|r| r.get("attempt"))
                    .and_then(Value::as_i64);
                if by != e.worker_id.as_deref() || attempt != Some(i64::from(e.attempt)) {
                    f.flag("outcome_vs_handler", || {
                        format!("job {id}: result {:?} is not the accepted completion's (worker {:?}, attempt {})", job.result, e.worker_id, e.attempt)
                    });
                }
            }
        }
        "failed" | "cancelled" => {}
        "queued" if job.run_at > cx.now => f.stats.queued_later += 1,
        // Judged by `dependency_left_waiting` (or `not_terminal`) there.
        "waiting" if !job.depends_on.is_empty() => {}
        other => f.flag("not_terminal", || {
            format!(
                "job {id} is still {other} (attempt {}, run_at {})",
                job.attempt, job.run_at
            )
        }),
    }
}

/// Every `lease_lost` a worker was told refers to a token whose claim had
/// ended by then (per the history and the one clock of this machine); every
/// claim a worker was given is in the history.
pub(super) fn check_client_fencing(
    f: &mut Findings,
    history: &HashMap<Uuid, Vec<&EventRow>>,
    obs: &Obs,
) {
    f.stats.client_claims = obs.claims.len() as u64;
    f.stats.client_lease_lost = obs.losts.len() as u64;
    let empty = Vec::new();
    // The claim event that minted a token: the latest claim by that worker
    // at that attempt recorded before the worker had the answer.
    let minted = |token: &Uuid| -> Option<(usize, &EventRow)> {
        let c = obs.claims.get(token)?;
        let h = history.get(&c.job).unwrap_or(&empty);
        h.iter()
            .enumerate()
            .rev()
            .find(|(_, e)| {
                e.event == "claimed"
                    && e.attempt == c.attempt
                    && e.worker_id.as_deref() == Some(c.worker.as_str())
                    && us(e.at) <= c.at_us + CLOCK_SLACK_US
            })
            .map(|(i, e)| (i, *e))
    };
    for (token, c) in &obs.claims {
        if minted(token).is_none() {
            f.flag("claim_not_in_history", || {
                format!(
                    "worker {} was given job {} (attempt {}), but the history has no such claim",
                    c.worker, c.job, c.attempt
                )
            });
        }
    }
    for l in &obs.losts {
        let Some(c) = obs.claims.get(&l.token) else {
            f.flag("lease_lost_client", || {
                format!(
                    "lease_lost ({}) on job {} for token {}, which no worker was given",
                    l.op, l.job, l.token
                )
            });
            continue;
        };
        if c.job != l.job {
            f.flag("lease_lost_client", || {
                format!(
                    "token {} presented for job {} but minted for {}",
                    l.token, l.job, c.job
                )
            });
            continue;
        }
        let Some((i, claim)) = minted(&l.token) else {
            continue; // already flagged as claim_not_in_history
        };
        let h = &history[&c.job];
        let superseded = h[i + 1..]
            .iter()
            .find(|e| ends_ownership(&e.event) && us(e.at) <= l.at_us + CLOCK_SLACK_US);
        if superseded.is_none() {
            f.flag("lease_lost_client", || {
                format!("job {}: worker {} was told lease_lost ({}) for its claim of seq {} although nothing had ended that claim yet", l.job, c.worker, l.op, claim.seq)
            });
        }
    }
}

//! Faults of the network: links of a replica, the leader or a worker cut
//! or slowed in the kernel, and restored.

use super::*;

impl Injector {
    /// Sets an impairment (the tc commands block for a few ms).
    pub(super) fn impair(&mut self, link: LinkId, what: Impairment, on: bool) -> bool {
        let Some(net) = self.net.clone() else {
            return false;
        };
        match tokio::task::block_in_place(|| net.set(link, what, on)) {
            Ok(()) => true,
            Err(e) => {
                let msg = format!("could not change the link {link}: {e}");
                self.say(msg.clone());
                self.stats.failures.push(msg);
                false
            }
        }
    }

    /// The replica whose process has this pid.
    pub(super) fn replica_by_pid(&mut self, pid: Option<u32>) -> Option<usize> {
        let pid = pid?;
        self.cluster
            .servers_up()
            .into_iter()
            .find(|&i| self.cluster.servers[i].proc.as_ref().map(|p| p.pid) == Some(pid))
    }

    /// (a) Cuts a replica off from PostgreSQL (`leader`: the one to cut,
    /// else one that does not lead).
    pub(super) async fn cut_replica(
        &mut self,
        leader: Option<(usize, Option<f64>)>,
    ) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        let r = match leader {
            Some((r, _)) => r,
            None => {
                let leading = self.leader_pid().await;
                let leading = self.replica_by_pid(leading);
                let others: Vec<usize> = (0..self.cluster.servers.len())
                    .filter(|&i| Some(i) != leading && !net.is_cut(LinkId::Db(i)))
                    .collect();
                if others.is_empty() {
                    return Vec::new();
                }
                others[self.rng.random_range(0..others.len())]
            }
        };
        let from_us = now_us();
        if !self.impair(LinkId::Db(r), Impairment::Cut, true) {
            return Vec::new();
        }
        let (lasts, cut) = match leader {
            Some((_, after_renewal_ms)) => {
                self.stats.leader_cuts.push(LeaderCut {
                    replica: r,
                    from_us,
                    to_us: from_us,
                    after_renewal_ms,
                    diagnosis: None,
                });
                self.say(format!(
                    "cut replica {r}, the maintenance leader, off from PostgreSQL for {} s{}",
                    CUT_LEADER_FOR.as_secs(),
                    after_renewal_ms.map_or(" (no renewal seen to aim at)".to_owned(), |ms| {
                        format!(" ({ms:.0} ms after its lease renewal)")
                    })
                ));
                (CUT_LEADER_FOR, Some(self.stats.leader_cuts.len() - 1))
            }
            None => {
                self.stats.replica_cuts += 1;
                self.say(format!(
                    "cut replica {r} off from PostgreSQL for {} s (its workers keep calling it)",
                    CUT_REPLICA_FOR.as_secs()
                ));
                (CUT_REPLICA_FOR, None)
            }
        };
        vec![(
            Instant::now() + lasts,
            Action::Restore(LinkId::Db(r), Impairment::Cut, cut),
        )]
    }

    /// (b) Cuts the maintenance leader off from PostgreSQL, aimed right
    /// after one of its lease writes (a renewal: the tick's maintenance
    /// statements follow it), so that statements of that tick are on the
    /// wire when the link goes.
    pub(super) async fn cut_leader(&mut self) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        // The leader, then its next lease write; a leader that writes none
        // within AIM_WITHIN may have just lost the lease (a slow link): look
        // for the leader once more.
        let mut target = None;
        for _ in 0..2 {
            let leading = self.leader_pid().await;
            let Some(r) = self.replica_by_pid(leading) else {
                continue;
            };
            let client = net.replica_client(r);
            let before = leadership::latest_lease_write(&self.pool, &client).await;
            let aim_until = Instant::now() + AIM_WITHIN;
            target = Some((r, None));
            while Instant::now() < aim_until {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let latest = leadership::latest_lease_write(&self.pool, &client).await;
                if let Some((seq, _, at)) = latest {
                    if before.as_ref().is_none_or(|b| b.0 != seq) {
                        let ms = (now_us() - at.timestamp_micros()) as f64 / 1e3;
                        target = Some((r, Some(ms)));
                        break;
                    }
                }
            }
            if target.is_some_and(|(_, ms)| ms.is_some()) {
                break;
            }
        }
        let Some((r, after_renewal_ms)) = target else {
            self.say("no maintenance leader found: cutting another replica instead".to_owned());
            return self.cut_replica(None).await;
        };
        self.cut_replica(Some((r, after_renewal_ms))).await
    }

    /// At the end of leader cut `i`: if no other replica took the lease
    /// meanwhile, records what the database's sessions were doing.
    pub(super) async fn diagnose_takeover(&mut self, i: usize, client: &str) {
        let Some(from) = self
            .stats
            .leader_cuts
            .get(i)
            .and_then(|c| chrono::DateTime::from_timestamp_micros(c.from_us))
        else {
            return;
        };
        if leadership::taken_over_since(&self.pool, client, from).await == Some(false) {
            let d = leadership::sessions(&self.pool).await;
            self.say(format!(
                "no other replica took the maintenance lease during the cut; {d}"
            ));
            self.stats.leader_cuts[i].diagnosis = Some(d);
        }
    }

    /// (c) Cuts the worker holding running jobs off from its replica.
    pub(super) async fn cut_worker(&mut self) -> Vec<(Instant, Action)> {
        let Some(net) = self.net.clone() else {
            return Vec::new();
        };
        let running: Vec<usize> = self
            .cluster
            .workers_running()
            .into_iter()
            .filter(|&j| !net.is_cut(LinkId::Worker(j)))
            .collect();
        let busy = self.busy_workers().await;
        let holding: Vec<usize> = running
            .iter()
            .copied()
            .filter(|j| busy.contains(&self.cluster.workers[*j].name(*j)))
            .collect();
        let pool = if holding.is_empty() {
            &running
        } else {
            &holding
        };
        if pool.is_empty() {
            return Vec::new();
        }
        let j = pool[self.rng.random_range(0..pool.len())];
        if !self.impair(LinkId::Worker(j), Impairment::Cut, true) {
            return Vec::new();
        }
        self.stats.worker_cuts += 1;
        if !holding.is_empty() {
            self.stats.cuts_with_jobs += 1;
        }
        let name = self.cluster.workers[j].name(j);
        self.say(format!(
            "cut worker {name} off from its replica for {} s ({})",
            CUT_WORKER_FOR.as_secs(),
            if holding.is_empty() {
                "holding no job"
            } else {
                "holding jobs"
            }
        ));
        vec![(
            Instant::now() + CUT_WORKER_FOR,
            Action::Restore(LinkId::Worker(j), Impairment::Cut, None),
        )]
    }

    /// (d) Slows some worker links (`workers`) or links to PostgreSQL.
    pub(super) fn slow(&mut self, workers: bool) -> Vec<(Instant, Action)> {
        let n = if workers {
            self.cluster.workers.len()
        } else {
            self.cluster.servers.len()
        };
        if n == 0 || self.net.is_none() {
            return Vec::new();
        }
        let k = self.rng.random_range(1..=n);
        let mut picked: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = self.rng.random_range(i..n);
            picked.swap(i, j);
        }
        picked.truncate(k);
        picked.sort_unstable();
        let link = |i: usize| {
            if workers {
                LinkId::Worker(i)
            } else {
                LinkId::Db(i)
            }
        };
        let mut follow = Vec::new();
        for &i in &picked {
            if self.impair(link(i), Impairment::Slow, true) {
                follow.push((
                    Instant::now() + SLOW_FOR,
                    Action::Restore(link(i), Impairment::Slow, None),
                ));
            }
        }
        let period = if workers {
            &mut self.stats.slow_worker_periods
        } else {
            &mut self.stats.slow_db_periods
        };
        period.0 += 1;
        period.1 += follow.len() as u64;
        self.say(format!(
            "slow {} for {} s: {} at most, a queue of {} packets, {} % lost",
            if workers {
                format!("the links of worker slots {picked:?} to their replicas")
            } else {
                format!("the links of replicas {picked:?} to PostgreSQL")
            },
            SLOW_FOR.as_secs(),
            crate::net::SLOW_RATE,
            crate::net::SLOW_QUEUE,
            crate::net::SLOW_LOSS_PERCENT
        ));
        follow
    }

    /// Ends an impairment; after a cut of a replica's link to PostgreSQL,
    /// probes until the replica takes a write again.
    pub(super) fn restore(&mut self, link: LinkId, what: Impairment, leader_cut: Option<usize>) {
        if !self.impair(link, what, false) {
            return;
        }
        if let Some(c) = leader_cut.and_then(|i| self.stats.leader_cuts.get_mut(i)) {
            c.to_us = now_us();
        }
        if what == Impairment::Slow {
            return;
        }
        self.say(format!("the link {link} is back"));
        if let LinkId::Db(r) = link {
            let client = HttpClient::builder(&self.cluster.base_url(r), &self.cluster.key)
                .timeout(Duration::from_secs(3))
                .connect_timeout(Duration::from_secs(1))
                .build();
            let healed = Instant::now();
            self.probes.push(tokio::spawn(async move {
                let client = client.map_err(|e| format!("replica {r}: client: {e}"))?;
                loop {
                    match client.resume(PARTITION_PROBE_QUEUE).await {
                        Ok(_) => return Ok((r, healed.elapsed())),
                        Err(e) if healed.elapsed() > RECOVER_WITHIN => {
                            return Err(format!(
                                "replica {r} took no write within {} s of its link to PostgreSQL \
                                 coming back: {e}",
                                RECOVER_WITHIN.as_secs()
                            ))
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }));
        }
    }
}

//! Faults of processes: a worker killed or stopped past its lease, a
//! replica (the maintenance leader or any) killed and restarted.

use super::*;

impl Injector {
    pub(super) fn kill_worker(&mut self) -> Vec<(Instant, Action)> {
        let candidates = self.cluster.workers_running();
        if candidates.is_empty() {
            return Vec::new();
        }
        let i = candidates[self.rng.random_range(0..candidates.len())];
        let w = &mut self.cluster.workers[i];
        let name = w.name(i);
        let Some(mut p) = w.proc.take() else {
            return Vec::new();
        };
        let pid = p.pid;
        p.kill();
        self.stats.worker_kills += 1;
        self.say(format!("SIGKILL worker {name} (pid {pid})"));
        let now = Instant::now();
        vec![(now + WORKER_DOWN_FOR, Action::RestartWorker(i, now))]
    }

    pub(super) async fn stop_worker(&mut self) -> Vec<(Instant, Action)> {
        if self.cluster.workers.iter().any(|w| w.stopped) {
            // One stopped at a time: kill one instead.
            return self.kill_worker();
        }
        let running = self.cluster.workers_running();
        let busy = self.busy_workers().await;
        let holding: Vec<usize> = running
            .iter()
            .copied()
            .filter(|i| busy.contains(&self.cluster.workers[*i].name(*i)))
            .collect();
        let pool = if holding.is_empty() {
            &running
        } else {
            &holding
        };
        if pool.is_empty() {
            return Vec::new();
        }
        let i = pool[self.rng.random_range(0..pool.len())];
        let w = &mut self.cluster.workers[i];
        let (name, generation) = (w.name(i), w.generation);
        let Some(p) = &w.proc else {
            return Vec::new();
        };
        if p.signal("STOP").is_err() {
            return Vec::new();
        }
        w.stopped = true;
        self.stats.worker_stops += 1;
        if !holding.is_empty() {
            self.stats.stops_with_jobs += 1;
        }
        self.say(format!(
            "SIGSTOP worker {name} for {} s ({})",
            STOP_FOR.as_secs(),
            if holding.is_empty() {
                "holding no job"
            } else {
                "holding jobs"
            }
        ));
        vec![(Instant::now() + STOP_FOR, Action::Cont(i, generation))]
    }

    /// Names (`w<slot>g<generation>`) of the workers holding running jobs.
    pub(super) async fn busy_workers(&self) -> Vec<String> {
        let q = sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT worker_id FROM tether.jobs WHERE state = 'running' AND worker_id IS NOT NULL",
        )
        .fetch_all(&self.pool);
        match tokio::time::timeout(Duration::from_secs(5), q).await {
            Ok(Ok(ids)) => ids
                .into_iter()
                .filter_map(|id| id.split('.').next().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The process id of the maintenance leader, per `tether.leases`.
    pub(super) async fn leader_pid(&self) -> Option<u32> {
        let q = sqlx::query_scalar::<_, String>(
            "SELECT holder FROM tether.leases WHERE name = 'maintenance' AND expires_at > now()",
        )
        .fetch_optional(&self.pool);
        let holder = tokio::time::timeout(Duration::from_secs(5), q)
            .await
            .ok()?
            .ok()??;
        // `serve:<pid>:<random>`
        holder
            .strip_prefix("serve:")?
            .split(':')
            .next()?
            .parse()
            .ok()
    }

    pub(super) async fn kill_server(&mut self, leader: bool) -> Vec<(Instant, Action)> {
        let up = self.cluster.servers_up();
        if up.len() < self.cluster.servers.len() {
            // One replica down at a time: kill a worker instead.
            return self.kill_worker();
        }
        let leader_pid = self.leader_pid().await;
        let by_pid = |pid: Option<u32>, c: &Cluster| {
            up.iter()
                .copied()
                .find(|&i| c.servers[i].proc.as_ref().map(|p| p.pid) == pid && pid.is_some())
        };
        let leading = by_pid(leader_pid, &self.cluster);
        let i = match (leader, leading) {
            (true, Some(i)) => i,
            _ => up[self.rng.random_range(0..up.len())],
        };
        let Some(mut p) = self.cluster.servers[i].proc.take() else {
            return Vec::new();
        };
        let pid = p.pid;
        p.kill();
        let was_leader = leading == Some(i);
        self.stats.server_kills += 1;
        if was_leader {
            self.stats.leader_kills += 1;
        }
        self.say(format!(
            "SIGKILL replica {i} (pid {pid}){}",
            if was_leader {
                ", the maintenance leader"
            } else {
                ""
            }
        ));
        let now = Instant::now();
        vec![(now + SERVER_DOWN_FOR, Action::RestartServer(i, now))]
    }
}

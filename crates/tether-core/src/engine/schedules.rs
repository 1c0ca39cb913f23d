//! Schedules: create, read, change, fire, and their runs.

use super::*;

impl Engine {
    /// The first fire instant from now, for an enabled schedule.
    pub(super) fn first_run(spec: &ScheduleSpec, cron: &CronSchedule) -> Option<DateTime<Utc>> {
        if spec.enabled {
            cron.next_after(Utc::now())
        } else {
            None
        }
    }

    /// Creates a schedule; its first run is the first fire instant from now.
    pub async fn create_schedule(&self, tenant: &str, spec: &ScheduleSpec) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        let cron = validate::schedule(spec, &self.limits)?;
        self.store
            .create_schedule(
                tenant,
                spec,
                Self::first_run(spec, &cron),
                self.limits.max_schedules_per_tenant,
            )
            .await
    }

    /// One schedule.
    pub async fn get_schedule(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        self.store.get_schedule(tenant, id).await
    }

    /// The newest `limit` runs of each of the tenant's schedules, keyed by
    /// schedule id (newest first); 1 to [`MAX_LISTED_RUNS`].
    pub async fn recent_schedule_runs(
        &self,
        tenant: &str,
        limit: u32,
    ) -> Result<std::collections::HashMap<Uuid, Vec<ScheduleRun>>> {
        validate::name("tenant", tenant)?;
        if !(1..=MAX_LISTED_RUNS).contains(&limit) {
            return Err(Error::invalid(
                "runs",
                format!("must be between 1 and {MAX_LISTED_RUNS}, got {limit}"),
            ));
        }
        let mut by_schedule: std::collections::HashMap<Uuid, Vec<ScheduleRun>> =
            std::collections::HashMap::new();
        for (id, run) in self.store.recent_schedule_runs(tenant, limit).await? {
            by_schedule.entry(id).or_default().push(run);
        }
        Ok(by_schedule)
    }

    /// A tenant's schedules, by name.
    pub async fn list_schedules(&self, tenant: &str) -> Result<Vec<Schedule>> {
        validate::name("tenant", tenant)?;
        self.store.list_schedules(tenant).await
    }

    /// Changes a schedule. `next_run_at` is recomputed from now, so
    /// re-enabling a schedule does not replay the time it was disabled.
    pub async fn patch_schedule(
        &self,
        tenant: &str,
        id: Uuid,
        patch: &SchedulePatch,
    ) -> Result<Schedule> {
        validate::name("tenant", tenant)?;
        let current = self.store.get_schedule(tenant, id).await?;
        let spec = patch.apply(&current.spec);
        let cron = validate::schedule(&spec, &self.limits)?;
        self.store
            .update_schedule(tenant, id, &spec, Self::next_run(&spec, &cron, &current))
            .await
    }

    /// A changed schedule's next run: the first fire instant from now, but
    /// never back onto an instant that already ran, whatever this host's
    /// clock says.
    fn next_run(
        spec: &ScheduleSpec,
        cron: &CronSchedule,
        current: &Schedule,
    ) -> Option<DateTime<Utc>> {
        Self::first_run(spec, cron).and_then(|next| match current.last_run_at {
            Some(last) if next <= last => cron.next_after(last),
            _ => Some(next),
        })
    }

    /// Makes the tenant's schedule named `spec.name` exactly `spec`:
    /// creates it, replaces its definition (keeping its id and runs; the
    /// next run recomputed as by a change), or, when it already is `spec`,
    /// writes nothing. For schedules declared in code and applied on every
    /// deploy. Two of these racing for one name both succeed, the later
    /// one's definition standing.
    pub async fn put_schedule(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
    ) -> Result<(Schedule, PutOutcome)> {
        validate::name("tenant", tenant)?;
        let cron = validate::schedule(spec, &self.limits)?;
        // A create losing a race to another one, or a replace to a delete,
        // looks again; a third race in a row is reported as it is.
        let mut attempts_left = 3;
        loop {
            attempts_left -= 1;
            let raced = match self.store.find_schedule(tenant, &spec.name).await? {
                Some(current) if current.spec == *spec => {
                    return Ok((current, PutOutcome::Unchanged))
                }
                Some(current) => {
                    let next_run_at = Self::next_run(spec, &cron, &current);
                    match self
                        .store
                        .update_schedule(tenant, current.id, spec, next_run_at)
                        .await
                    {
                        Ok(s) => return Ok((s, PutOutcome::Updated)),
                        Err(e @ Error::NotFound(_)) => e,
                        Err(e) => return Err(e),
                    }
                }
                None => match self
                    .store
                    .create_schedule(
                        tenant,
                        spec,
                        Self::first_run(spec, &cron),
                        self.limits.max_schedules_per_tenant,
                    )
                    .await
                {
                    Ok(s) => return Ok((s, PutOutcome::Created)),
                    Err(e @ Error::AlreadyExists(_)) => e,
                    Err(e) => return Err(e),
                },
            };
            if attempts_left == 0 {
                return Err(raced);
            }
        }
    }

    /// Deletes a schedule and its runs (the jobs it enqueued stay).
    pub async fn delete_schedule(&self, tenant: &str, id: Uuid) -> Result<()> {
        validate::name("tenant", tenant)?;
        self.store.delete_schedule(tenant, id).await
    }

    /// A schedule's newest [`SCHEDULE_RUNS_SHOWN`] runs, newest first.
    pub async fn schedule_runs(&self, tenant: &str, id: Uuid) -> Result<Vec<ScheduleRun>> {
        validate::name("tenant", tenant)?;
        self.store
            .schedule_runs(tenant, id, SCHEDULE_RUNS_SHOWN)
            .await
    }

    /// Runs a schedule now, outside its timetable: enqueues its job and
    /// records the run; `next_run_at` stays.
    pub async fn trigger_schedule(&self, tenant: &str, id: Uuid) -> Result<Job> {
        validate::name("tenant", tenant)?;
        let schedule = self.store.get_schedule(tenant, id).await?;
        let spec = &schedule.spec;
        let job = NewJob::new(&spec.queue, &spec.kind, spec.payload.clone())
            .idempotency_key(schedule::trigger_key(id));
        validate::new_job("", &job, &self.limits)?;
        let refs = NewJobRef::mint(std::slice::from_ref(&job));
        let job = self.store.trigger_schedule(tenant, id, refs[0]).await?;
        counters::enqueued(
            tenant,
            &[Enqueued {
                job: job.clone(),
                created: true,
            }],
        );
        Ok(job)
    }

    /// The next `count` (1–100) fire instants of `cron` in `timezone`
    /// strictly after `from` (default now), by the very function the
    /// scheduler uses.
    pub fn cron_preview(
        cron: &str,
        timezone: &str,
        from: Option<DateTime<Utc>>,
        count: u32,
    ) -> Result<Vec<DateTime<Utc>>> {
        if !(1..=MAX_PREVIEW).contains(&count) {
            return Err(Error::invalid(
                "count",
                format!("must be between 1 and {MAX_PREVIEW}, got {count}"),
            ));
        }
        if let Some(from) = &from {
            validate::instant("from", from)?;
        }
        // The same text rule as a schedule's, so a preview never shows
        // times for a cron that creating the schedule would refuse.
        validate::printable_ascii("cron", cron)?;
        validate::printable_ascii("timezone", timezone)?;
        let schedule = CronSchedule::parse(cron, timezone)?;
        Ok(schedule.upcoming(from.unwrap_or_else(Utc::now), count as usize))
    }

    /// One scheduler pass (the maintenance leader runs it): fires at most
    /// `batch` due schedules, one run each, recorded by the store in one
    /// set-based transaction.
    ///
    /// A schedule whose due instant is at most `catch_up` old fires that
    /// instant and moves to the next one (which may be due already: the
    /// next pass fires it), so a leader failover shorter than `catch_up`
    /// loses no instant. One that is older (the scheduler was down) fires
    /// once, stamped with the latest missed instant, and moves to the first
    /// instant after now: the missed fires collapse into one run. The
    /// instants are worked out here, by [`CronSchedule`], for the whole
    /// pass; the store only writes them.
    pub async fn fire_due_schedules(
        &self,
        batch: u32,
        catch_up: std::time::Duration,
    ) -> Result<FireReport> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let (now, due) = self.store.due_schedules(batch).await?;
        let mut report = FireReport::default();
        // Parsed once per expression and zone: a pass of thousands of
        // schedules usually shares a handful of them.
        let mut parsed: HashMap<(&str, &str), Option<CronSchedule>> = HashMap::new();
        let mut fires = Vec::with_capacity(due.len());
        for s in &due {
            let Some(expected) = s.next_run_at else {
                continue;
            };
            // Stored definitions were valid when written; one that no longer
            // parses (e.g. a zone renamed in newer tz data) cannot fire.
            let cron = parsed
                .entry((s.spec.cron.as_str(), s.spec.timezone.as_str()))
                .or_insert_with(|| CronSchedule::parse(&s.spec.cron, &s.spec.timezone).ok());
            let Some(cron) = cron else {
                report.failed += 1;
                continue;
            };
            let late = (now - expected).to_std().unwrap_or_default();
            let (fire_at, next_run_at) = if late <= catch_up {
                (expected, cron.next_after(expected))
            } else {
                let fire_at = cron.latest_in(expected, now).unwrap_or(expected);
                (fire_at, cron.next_after(now.max(fire_at)))
            };
            let job = NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
                .idempotency_key(schedule::fire_key(s.id, fire_at));
            fires.push(Fire {
                schedule_id: s.id,
                tenant: s.tenant.clone(),
                expected_next_run_at: expected,
                fire_at,
                next_run_at,
                job,
                overlap: s.spec.overlap,
            });
        }
        if fires.is_empty() {
            return Ok(report);
        }
        let refs: Vec<FireRef<'_>> = fires
            .iter()
            .map(|fire| FireRef {
                fire,
                job_id: Uuid::now_v7(),
            })
            .collect();
        let outcomes = self.store.fire_schedules(&refs).await?;
        for (fire, outcome) in fires.iter().zip(outcomes) {
            match outcome {
                FireOutcome::Ran(RunOutcome::Enqueued, _) => {
                    report.enqueued += 1;
                    counters::fired(&fire.tenant, fire.fire_at);
                }
                FireOutcome::Ran(RunOutcome::Skipped, _) => report.skipped += 1,
                FireOutcome::Raced => report.raced += 1,
            }
        }
        Ok(report)
    }

    /// How long until the earliest enabled schedule is due (zero when one
    /// already is), by the database's clock; `None` with no enabled schedule.
    pub async fn next_schedule_due(&self) -> Result<Option<std::time::Duration>> {
        let (now, next) = self.store.next_schedule_due().await?;
        Ok(next.map(|at| (at - now).to_std().unwrap_or_default()))
    }

    /// Deletes at most `batch` schedule runs older than `retention_ms`.
    pub async fn prune_schedule_runs(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        validate::millis("retention_ms", retention_ms, 0..=i64::MAX)?;
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        self.store.prune_schedule_runs(retention_ms, batch).await
    }
}

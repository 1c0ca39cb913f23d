//! The run itself: the load, the faults and the limits while it lasts,
//! then the rows and history the verdict reads.

use super::*;

pub(super) async fn run(
    opts: Opts,
    admin_url: String,
    database_url: String,
    pg_restart: String,
    pair: Option<Arc<PgPair>>,
    partitions: Option<Partitions>,
) -> Result<Outcome, String> {
    let t0 = Instant::now();
    let clock = crate::clock::ClockWatch::start();
    let obs = Arc::new(Mutex::new(Obs::default()));
    if partitions.is_some() {
        // The schema first, then the audit, then the replicas: the audit
        // sees the very first lease.
        let options = tether_postgres::PgOptions {
            max_connections: 2,
            ..Default::default()
        };
        let store = connect_store(database_url.clone(), options).await?;
        leadership::install(store.pool()).await?;
        store.pool().close().await;
    }
    let mut cluster = Cluster::new(
        database_url.clone(),
        ADMIN_KEY.to_owned(),
        opts.seed,
        SERVERS,
        opts.workers,
        obs.clone(),
        opts.worker_cmd.clone(),
    )
    .map_err(|e| format!("cannot pick ports: {e}"))?;
    cluster.net = partitions
        .as_ref()
        .map(|p| (p.net.clone(), p.replica_urls.clone()));
    // The first replica applies the migrations; then the others.
    for i in 0..SERVERS {
        cluster
            .ensure_server(i, Instant::now() + Duration::from_secs(60))
            .await?;
    }
    let db = RunDb::open(&database_url, opts.failover).await?;
    let pool = db.pool.clone();
    for i in 0..opts.workers {
        cluster.start_worker(i).await?;
    }
    say(
        t0,
        format!(
            "{SERVERS} replicas on ports {:?} and {} workers running",
            cluster.servers.iter().map(|s| s.port).collect::<Vec<_>>(),
            opts.workers
        ),
    );

    let start = Instant::now();
    let setup = t0.elapsed();
    let window = Duration::from_secs(opts.seconds);
    let deadline = start + window + opts.drain_timeout();
    let clients = (0..SERVERS)
        .map(|i| {
            HttpClient::builder(&cluster.base_url(i), ADMIN_KEY)
                .timeout(Duration::from_secs(15))
                .connect_timeout(Duration::from_secs(2))
                .build()
                .map_err(|e| format!("client: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    configure_limited(&clients[0], &pool).await?;
    // The stream's reader, from a cursor taken before the first job, on the
    // first replica (killed and restarted like the others).
    let stream_client = HttpClient::builder(&cluster.base_url(0), ADMIN_KEY)
        .timeout(Duration::from_secs(15))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| format!("client: {e}"))?;
    let reader = StreamReader::start(stream_client, stream_reader::head(&pool).await?);
    if partitions.is_some() {
        create_schedule(&clients[0]).await?;
        say(
            t0,
            format!(
                "schedule {} fires every second into queue {} (overlap skip; nobody serves it)",
                leadership::CRON_SCHEDULE,
                leadership::CRON_QUEUE
            ),
        );
    }
    let produce_window = window.mul_f64(0.85);
    let limited_per_mille = plan::limited_per_mille(opts.jobs, produce_window.as_secs_f64());
    say(
        t0,
        format!(
            "queue {} limited to {}; about {:.1} % of the jobs go there",
            plan::LIMITED_QUEUE,
            report::limits(&plan::LIMITS),
            limited_per_mille as f64 / 10.0
        ),
    );
    let producer = Producer {
        clients,
        obs: obs.clone(),
        seed: opts.seed,
        jobs: opts.jobs,
        limited_per_mille,
        start,
        window: produce_window,
        deadline,
    };
    let chunks = produce::chunks(opts.seed, opts.jobs);
    // What every job the producers send with dependencies waits for.
    let waits = graph::waits(opts.seed, &chunks, PRODUCERS);
    say(
        t0,
        format!(
            "{} of the jobs wait for others (small graphs in about a third of the batches, \
             and singles after an acknowledged job)",
            waits.len()
        ),
    );
    let mut per_producer = vec![Vec::new(); PRODUCERS];
    for (i, c) in chunks.into_iter().enumerate() {
        per_producer[i % PRODUCERS].push(c);
    }
    let producers: Vec<_> = per_producer
        .into_iter()
        .enumerate()
        .map(|(i, chunks)| AbortOnDrop::spawn(producer.clone().run(i, chunks)))
        .collect();
    let injector = Injector {
        cluster,
        pool: pool.clone(),
        admin_url,
        pg_restart,
        failover: pair,
        rng: rand::rngs::StdRng::seed_from_u64(opts.seed ^ 0x0dd_ba11),
        start,
        stats: FaultStats::default(),
        net: partitions.as_ref().map(|p| p.net.clone()),
        probes: Vec::new(),
    };
    let schedule = if partitions.is_some() {
        faults::partition_schedule(opts.seed, window)
    } else {
        faults::schedule(opts.seed, window)
    };
    let injector = AbortOnDrop::spawn(injector.run(schedule));
    let progressing = Arc::new(AtomicBool::new(true));
    let progress = AbortOnDrop::spawn(progress(
        pool.clone(),
        obs.clone(),
        opts.jobs,
        start,
        progressing.clone(),
    ));

    let mut producer_problems = Vec::new();
    for p in producers {
        match p.join().await {
            Ok(problems) => producer_problems.extend(problems),
            Err(e) => producer_problems.push(format!("a producer panicked: {e}")),
        }
    }
    say(start, "producers done");
    let (mut cluster, fault_stats) = injector
        .join()
        .await
        .map_err(|e| format!("the fault injector panicked: {e}"))?;
    let faults_done = start.elapsed();
    if partitions.is_some() {
        say(
            start,
            format!(
                "faults over: {} leader cuts, {} replica cuts, {} worker cuts, {} + {} slowed \
                 periods",
                fault_stats.leader_cuts.len(),
                fault_stats.replica_cuts,
                fault_stats.worker_cuts,
                fault_stats.slow_worker_periods.0,
                fault_stats.slow_db_periods.0
            ),
        );
    } else {
        say(
            start,
            format!(
                "faults over: {} kills, {} stops, {} PostgreSQL {}",
                fault_stats.kills(),
                fault_stats.worker_stops,
                if opts.failover {
                    fault_stats.failovers
                } else {
                    fault_stats.pg_restarts
                },
                if opts.failover {
                    "failover(s)"
                } else {
                    "restart(s)"
                }
            ),
        );
    }
    // Every process up for the drain (the injector restarted them; check).
    let mut fault_failures = fault_stats.failures.clone();
    let mut crashes = fault_stats.crashes.clone();
    crashes.extend(cluster.crashed());
    for i in 0..SERVERS {
        if let Err(e) = cluster
            .ensure_server(i, Instant::now() + Duration::from_secs(30))
            .await
        {
            fault_failures.push(e);
        }
    }
    for i in 0..cluster.workers.len() {
        if !cluster.workers_running().contains(&i) {
            if let Err(e) = cluster.start_worker(i).await {
                fault_failures.push(e);
            }
        }
    }

    // Drain: until no job is queued or running, or the deadline.
    let drain_started = Instant::now();
    loop {
        if let Ok((queued, running)) = active(&pool).await {
            if queued + running == 0 {
                break;
            }
        }
        if Instant::now() > deadline {
            say(start, "drain timed out");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain = drain_started.elapsed();
    progressing.store(false, Ordering::Relaxed);
    let _ = progress.join().await;
    // The stream's reader gets time to catch up with the history as it is
    // now, while the replicas still run (generously: a stalled host must
    // not fail it).
    let required = history_through(&pool)
        .await
        .map_err(|e| format!("cannot read the history: {e}"))?;
    let caught_up = reader
        .catch_up(required.values().map(|(_, n)| n).sum(), STREAM_CATCH_UP)
        .await;
    let mut stream = reader.stop();
    stream.required = required
        .into_iter()
        .map(|(id, (seq, _))| (id, seq))
        .collect();
    stream.caught_up = caught_up;
    say(
        start,
        match caught_up {
            Some(t) => format!(
                "the event stream's reader caught up in {:.1}s ({} events)",
                t.as_secs_f64(),
                stream.events.len()
            ),
            None => format!(
                "the event stream's reader had not caught up after {} s ({} events)",
                STREAM_CATCH_UP.as_secs(),
                stream.events.len()
            ),
        },
    );
    say(
        start,
        format!(
            "drained in {:.1}s; stopping every process",
            drain.as_secs_f64()
        ),
    );
    crashes.extend(cluster.crashed());
    let killed = cluster.stop_all().await;
    drop(cluster);
    let (traffic, episodes) = match &partitions {
        Some(p) => (Some(p.net.traffic()), p.net.episodes()),
        None => (None, Vec::new()),
    };

    if std::env::var("TETHER_CHAOS_SABOTAGE").is_ok_and(|v| v == "1") {
        sabotage(&pool)
            .await
            .map_err(|e| format!("sabotage failed: {e}"))?;
        say(
            start,
            format!(
                "TETHER_CHAOS_SABOTAGE=1: deleted a job, doubled a completion, lowered a budget, \
                 moved {} claims of the limited queue's key {} to one instant, left a job a \
                 failed dependency cancelled waiting",
                plan::LIMITS.rate.count + 1,
                plan::HOT_KEY
            ),
        );
    }
    let check_started = Instant::now();
    let (jobs, events, now) = load(&pool)
        .await
        .map_err(|e| format!("cannot read the results: {e}"))?;
    let partition_facts = match &partitions {
        Some(p) => Some(leadership::Facts {
            replicas: SERVERS,
            clients: (0..SERVERS).map(|r| (p.net.replica_client(r), r)).collect(),
            audit: leadership::load(&pool)
                .await
                .map_err(|e| format!("cannot read the leadership audit: {e}"))?,
            episodes,
            leader_cuts: fault_stats.leader_cuts.clone(),
        }),
        None => None,
    };
    pool.close().await;
    drop(db);
    let obs = std::mem::take(&mut *obs.lock().unwrap_or_else(|e| e.into_inner()));
    let cx = Context {
        seed: opts.seed,
        jobs: opts.jobs,
        now,
        stops_with_jobs: fault_stats.stops_with_jobs,
        cuts_with_jobs: fault_stats.cuts_with_jobs,
        limited_per_mille,
        limits: plan::LIMITS,
        failover: opts
            .failover
            .then_some(fault_stats.promoted_at.map(|at| (at, SERVERS)))
            .flatten(),
        partitions: partition_facts,
        clock_back_us: clock.stop(),
        waits,
        stream: Some(stream),
    };
    let mut findings = check::check(&jobs, &events, &obs, &cx);
    for p in producer_problems {
        findings.flag("producer_problems", || p);
    }
    for f in fault_failures {
        findings.flag("fault_failures", || f);
    }
    for f in &fault_stats.recovery_failures {
        findings.flag(check::RECOVERY_CHECK, || f.clone());
    }
    if opts.partitions {
        let leader_cuts = fault_stats.leader_cuts.len() as u64;
        let injected = [
            ("leader cuts", leader_cuts),
            ("replica cuts", fault_stats.replica_cuts),
            ("worker cuts", fault_stats.worker_cuts),
            ("slowed worker links", fault_stats.slow_worker_periods.1),
            ("slowed links to PostgreSQL", fault_stats.slow_db_periods.1),
        ];
        for (what, n) in injected {
            if n == 0 {
                findings.flag("fault_failures", || {
                    format!("no {what}: the network's faults were not all injected")
                });
            }
        }
        if fault_stats.pg_restarts + fault_stats.failovers != 0 {
            findings.flag("fault_failures", || {
                "PostgreSQL was restarted in a --partitions run".to_owned()
            });
        }
    } else if opts.failover {
        if fault_stats.failovers != 1 || fault_stats.pg_restarts != 0 {
            findings.flag("fault_failures", || {
                format!(
                    "PostgreSQL failed over {} times (and was restarted {} times), not once",
                    fault_stats.failovers, fault_stats.pg_restarts
                )
            });
        }
    } else if fault_stats.pg_restarts != 1 {
        findings.flag("fault_failures", || {
            format!(
                "PostgreSQL was restarted {} times, not once",
                fault_stats.pg_restarts
            )
        });
    }
    for c in crashes {
        findings.flag("crashes", || c);
    }
    if killed > 0 {
        findings.flag("graceful_stop", || {
            format!("{killed} processes did not exit within 15 s of SIGTERM and were killed")
        });
    }
    let timings = Timings {
        setup,
        faults: faults_done,
        drain,
        check: check_started.elapsed(),
        total: t0.elapsed(),
    };
    Ok(Outcome {
        findings,
        faults: fault_stats,
        obs,
        timings,
        traffic,
    })
}

/// The schedule of a `--partitions` run ([`leadership::CRON_SCHEDULE`]):
/// every second, overlap `skip`, into a queue no worker serves.
pub(super) async fn create_schedule(client: &HttpClient) -> Result<(), String> {
    let mut spec = tether_core::ScheduleSpec::new(
        leadership::CRON_SCHEDULE,
        leadership::CRON_EVERY_SECOND,
        leadership::CRON_QUEUE,
        plan::KIND,
    );
    spec.overlap = tether_core::Overlap::Skip;
    let mut tries = 0;
    while let Err(e) = client.create_schedule(&spec).await {
        tries += 1;
        if !e.is_retryable() || tries >= 20 {
            return Err(format!(
                "cannot create the schedule {}: {e}",
                leadership::CRON_SCHEDULE
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Sets the limited queue's limits through the API ([`plan::LIMITS`]) and
/// reads back from `tether.queues` that the server stored exactly those.
pub(super) async fn configure_limited(client: &HttpClient, pool: &PgPool) -> Result<(), String> {
    let l = plan::LIMITS;
    let patch = QueueConfigPatch {
        max_running: Some(Some(l.max_running)),
        rate_limit: Some(Some(l.rate)),
        key_max_running: Some(Some(l.key_max_running)),
        fair: Some(l.fair),
        ..Default::default()
    };
    let mut tries = 0;
    while let Err(e) = client.configure_queue(plan::LIMITED_QUEUE, &patch).await {
        tries += 1;
        if !e.is_retryable() || tries >= 20 {
            return Err(format!(
                "cannot set the limits of queue {}: {e}",
                plan::LIMITED_QUEUE
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let row = sqlx::query(
        "SELECT max_running, rate_limit_count, rate_limit_period_ms, key_max_running, fair
         FROM tether.queues WHERE name = $1",
    )
    .bind(plan::LIMITED_QUEUE)
    .fetch_one(pool)
    .await
    .map_err(|e| {
        format!(
            "cannot read the limits of queue {}: {e}",
            plan::LIMITED_QUEUE
        )
    })?;
    let stored = (|| -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<Option<i32>, _>("max_running")?,
            row.try_get::<Option<i32>, _>("rate_limit_count")?,
            row.try_get::<Option<i64>, _>("rate_limit_period_ms")?,
            row.try_get::<Option<i32>, _>("key_max_running")?,
            row.try_get::<bool, _>("fair")?,
        ))
    })()
    .map_err(|e| {
        format!(
            "cannot read the limits of queue {}: {e}",
            plan::LIMITED_QUEUE
        )
    })?;
    let wanted = (
        Some(l.max_running),
        Some(l.rate.count),
        Some(l.rate.period_ms),
        Some(l.key_max_running),
        l.fair,
    );
    if stored != wanted {
        return Err(format!(
            "queue {}: asked for (max_running, rate count, period_ms, key_max_running, fair) \
             {wanted:?}, the server stored {stored:?}",
            plan::LIMITED_QUEUE
        ));
    }
    Ok(())
}

/// Breaks five promises behind tether's back, to show that the checks
/// bite on a real database (`TETHER_CHAOS_SABOTAGE=1`; the run must fail).
pub(super) async fn sabotage(pool: &PgPool) -> Result<(), sqlx::Error> {
    let squeeze = format!(
        // Claims beyond every limit of the limited queue: the first claims
        // of the `count + 1` jobs of its hot key claimed first, moved to the
        // earliest of them, so that they fall into one window and their
        // first attempts all run from that instant (until their real ends).
        "WITH first AS (
             SELECT DISTINCT ON (e.job_id) e.job_id, e.seq, e.at FROM tether.job_events e
             JOIN tether.jobs j ON j.id = e.job_id
             WHERE j.queue = '{queue}' AND j.concurrency_key = '{key}' AND e.event = 'claimed'
             ORDER BY e.job_id, e.seq),
         picked AS (SELECT * FROM first ORDER BY at LIMIT {n})
         UPDATE tether.job_events e SET at = (SELECT min(at) FROM picked)
         FROM picked WHERE e.job_id = picked.job_id AND e.seq = picked.seq",
        queue = plan::LIMITED_QUEUE,
        key = plan::HOT_KEY,
        n = plan::LIMITS.rate.count + 1
    );
    for statement in [
        // Lose an acknowledged job.
        "DELETE FROM tether.jobs WHERE id =
            (SELECT id FROM tether.jobs WHERE state = 'succeeded' ORDER BY id LIMIT 1)",
        // Accept a second completion.
        "INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
         SELECT id, tenant, now(), 'succeeded', attempt, worker_id FROM tether.jobs
         WHERE state = 'succeeded' ORDER BY id OFFSET 1 LIMIT 1",
        // Claims beyond the budget.
        "UPDATE tether.jobs SET max_attempts = 1 WHERE id =
            (SELECT id FROM tether.jobs WHERE attempt >= 2 ORDER BY id LIMIT 1)",
        squeeze.as_str(),
        // Leave a job that a failed dependency cancelled waiting instead.
        r#"WITH victim AS (
             SELECT job_id, seq FROM tether.job_events
             WHERE event = 'cancelled' AND detail LIKE '{"dependency"%'
             ORDER BY job_id LIMIT 1),
         gone AS (
             DELETE FROM tether.job_events e USING victim v
             WHERE e.job_id = v.job_id AND e.seq = v.seq)
         UPDATE tether.jobs j SET state = 'waiting', finished_at = NULL
         FROM victim v WHERE j.id = v.job_id"#,
    ] {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// Queued and running jobs (the schedule's queue, which nobody serves,
/// aside).
pub(super) async fn active(pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
    let row = sqlx::query(
        "SELECT count(*) FILTER (WHERE state = 'queued') AS queued,
                count(*) FILTER (WHERE state = 'running') AS running
         FROM tether.jobs WHERE queue <> $1",
    )
    .bind(leadership::CRON_QUEUE)
    .fetch_one(pool)
    .await?;
    Ok((row.try_get("queued")?, row.try_get("running")?))
}

/// A progress line every 10 s.
pub(super) async fn progress(
    pool: PgPool,
    obs: Arc<Mutex<Obs>>,
    jobs: u64,
    start: Instant,
    on: Arc<AtomicBool>,
) {
    let mut next = start + Duration::from_secs(10);
    while on.load(Ordering::Relaxed) {
        if Instant::now() < next {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        next += Duration::from_secs(10);
        let (acked, errors) = {
            let o = obs.lock().unwrap_or_else(|e| e.into_inner());
            (o.acks.len(), o.errors.values().sum::<u64>())
        };
        let states = match active(&pool).await {
            Ok((q, r)) => format!("queued {q}, running {r}"),
            Err(_) => "database unavailable".to_owned(),
        };
        say(
            start,
            format!("acknowledged {acked}/{jobs}; {states}; client errors so far {errors}"),
        );
    }
}

/// The longest the stream's reader is given to catch up at the end.
const STREAM_CATCH_UP: Duration = Duration::from_secs(120);

/// By job, the last `seq` of its history and its number of events (the
/// `--partitions` schedule's job aside, as in [`load`]).
pub(super) async fn history_through(
    pool: &PgPool,
) -> Result<std::collections::HashMap<uuid::Uuid, (i64, usize)>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT job_id, max(seq) AS seq, count(*) AS n FROM tether.job_events
         WHERE job_id NOT IN (SELECT id FROM tether.jobs WHERE queue = $1)
         GROUP BY job_id",
    )
    .bind(leadership::CRON_QUEUE)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let n: i64 = r.try_get("n")?;
            Ok((r.try_get("job_id")?, (r.try_get("seq")?, n as usize)))
        })
        .collect()
}

/// Every job and every event, and the database's `now()`; the job of the
/// `--partitions` schedule (its queue nobody serves) aside: it is no
/// producer's, and the leadership checks judge the schedule.
pub(super) async fn load(
    pool: &PgPool,
) -> Result<(Vec<JobRow>, Vec<EventRow>, DateTime<Utc>), sqlx::Error> {
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(pool).await?;
    let jobs = sqlx::query(
        "SELECT id, idempotency_key, queue, concurrency_key, state, attempt, max_attempts,
                (payload->>'n')::bigint AS n, run_at, result, depends_on, dependency_failure
         FROM tether.jobs WHERE queue <> $1",
    )
    .bind(leadership::CRON_QUEUE)
    .try_map(|r: sqlx::postgres::PgRow| {
        Ok(JobRow {
            id: r.try_get("id")?,
            key: r.try_get("idempotency_key")?,
            queue: r.try_get("queue")?,
            concurrency_key: r.try_get("concurrency_key")?,
            state: r.try_get("state")?,
            attempt: r.try_get("attempt")?,
            max_attempts: r.try_get("max_attempts")?,
            n: r.try_get("n")?,
            run_at: r.try_get("run_at")?,
            result: r.try_get("result")?,
            depends_on: r
                .try_get::<Option<Vec<uuid::Uuid>>, _>("depends_on")?
                .unwrap_or_default(),
            dependency_failure: r
                .try_get::<String, _>("dependency_failure")?
                .parse()
                .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        })
    })
    .fetch_all(pool)
    .await?;
    let events = sqlx::query(
        "SELECT job_id, seq, at, event, attempt, worker_id, detail
         FROM tether.job_events
         WHERE job_id NOT IN (SELECT id FROM tether.jobs WHERE queue = $1)
         ORDER BY job_id, seq",
    )
    .bind(leadership::CRON_QUEUE)
    .try_map(|r: sqlx::postgres::PgRow| {
        Ok(EventRow {
            job_id: r.try_get("job_id")?,
            seq: r.try_get("seq")?,
            at: r.try_get("at")?,
            event: r.try_get("event")?,
            attempt: r.try_get("attempt")?,
            worker_id: r.try_get("worker_id")?,
            detail: r.try_get("detail")?,
        })
    })
    .fetch_all(pool)
    .await?;
    Ok((jobs, events, now))
}

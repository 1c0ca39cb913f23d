//! Queues, tenants and keys, the metrics and the OpenAPI document.

use super::*;

tether_conformance::both_backends!(
    queue_stats_pause_resume_configure,
    tenants_and_keys,
    metrics_need_an_admin_key_and_show_queues,
    openapi_document_is_served,
);

async fn queue_stats_pause_resume_configure(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    c.enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap();
    c.enqueue(NewJob::new("qs", "k", Value::Null).run_at(RunAt::Delay(600_000)))
        .await
        .unwrap();
    let q = c.get_queue("qs").await.unwrap();
    assert_eq!(q.name, "qs");
    assert!(!q.paused);
    assert_eq!(q.counts.queued, 2);
    assert_eq!((q.ready, q.scheduled, q.expired_leases), (1, 1, 0));
    assert_eq!(q.max_attempts, 5);
    assert_eq!(q.backoff, Backoff::default());
    assert_eq!(q.default_lease_ttl_ms, 30_000);
    let all = c.list_queues().await.unwrap();
    assert!(all.iter().any(|q| q.name == "qs" && q.counts.queued == 2));
    // An unused queue reads as empty.
    let empty = c.get_queue("nothing-here").await.unwrap();
    assert_eq!(empty.counts, Default::default());

    let paused = c.pause("qs").await.unwrap();
    assert!(paused.paused);
    assert!(c
        .claim("qs", &ClaimOptions::new("w1"))
        .await
        .unwrap()
        .is_empty());
    c.enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap();
    let resumed = c.resume("qs").await.unwrap();
    assert!(!resumed.paused);
    assert_eq!(resumed.counts.queued, 3);
    assert_eq!(
        c.claim("qs", &ClaimOptions::new("w1").limit(5))
            .await
            .unwrap()
            .len(),
        2
    );

    let patch = QueueConfigPatch {
        max_attempts: Some(9),
        backoff: Some(Backoff {
            base_ms: 10,
            cap_ms: 20,
        }),
        default_lease_ttl_ms: Some(45_000),
        max_running: Some(Some(4)),
        rate_limit: Some(Some(RateLimit {
            count: 50,
            period_ms: 60_000,
        })),
        key_max_running: Some(Some(2)),
        fair: Some(true),
    };
    let q = c.configure_queue("qs", &patch).await.unwrap();
    assert_eq!(q.max_attempts, 9);
    assert_eq!(q.max_running, Some(4));
    assert_eq!(
        (q.rate_limit, q.key_max_running, q.fair),
        (
            Some(RateLimit {
                count: 50,
                period_ms: 60_000
            }),
            Some(2),
            true
        )
    );
    assert_eq!(
        q.backoff,
        Backoff {
            base_ms: 10,
            cap_ms: 20
        }
    );
    assert_eq!(q.default_lease_ttl_ms, 45_000);
    // Unset fields stay as they are.
    let q = c
        .configure_queue(
            "qs",
            &QueueConfigPatch {
                max_attempts: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((q.max_attempts, q.default_lease_ttl_ms), (4, 45_000));
    assert_eq!(q.max_running, Some(4), "a limit left out stays");
    let j = c
        .enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap()
        .job;
    assert_eq!(j.max_attempts, 4);
    let cj = c.claim("qs", &ClaimOptions::new("w1")).await.unwrap();
    let lease = (cj[0].job.lease_expires_at.unwrap() - Utc::now()).num_milliseconds();
    assert!(
        (40_000..=45_500).contains(&lease),
        "the queue's lease: {lease}"
    );
    // The limit holds over HTTP: three of its four slots are taken.
    for _ in 0..3 {
        c.enqueue(NewJob::new("qs", "k", Value::Null))
            .await
            .unwrap();
    }
    let opts = ClaimOptions::new("w2").limit(3);
    assert_eq!(
        c.claim("qs", &opts).await.unwrap().len(),
        1,
        "one slot left"
    );
    let cleared = QueueConfigPatch {
        max_running: Some(None),
        rate_limit: Some(None),
        key_max_running: Some(None),
        fair: Some(false),
        ..Default::default()
    };
    let q = c.configure_queue("qs", &cleared).await.unwrap();
    assert_eq!(
        (q.max_running, q.rate_limit, q.key_max_running, q.fair),
        (None, None, None, false)
    );
    assert_eq!(c.claim("qs", &opts).await.unwrap().len(), 2, "no limit");
    for bad in [
        QueueConfigPatch {
            max_attempts: Some(0),
            ..Default::default()
        },
        QueueConfigPatch {
            max_running: Some(Some(0)),
            ..Default::default()
        },
        QueueConfigPatch {
            key_max_running: Some(Some(100_001)),
            ..Default::default()
        },
        QueueConfigPatch {
            rate_limit: Some(Some(RateLimit {
                count: 10,
                period_ms: 999,
            })),
            ..Default::default()
        },
    ] {
        assert!(c
            .configure_queue("qs", &bad)
            .await
            .unwrap_err()
            .is_invalid_argument());
    }
    let q = c.get_queue("qs").await.unwrap();
    assert_eq!(
        (q.max_running, q.key_max_running, q.rate_limit),
        (None, None, None)
    );
}

async fn tenants_and_keys(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let acme = c.create_tenant("acme").await.unwrap();
    assert_eq!(acme.tenant.name, "acme");
    let acme_client = s.client(&acme.api_key);
    let me = acme_client.whoami().await.unwrap();
    assert_eq!(
        (me.tenant.id, me.tenant.name.as_str()),
        (acme.tenant.id, "acme")
    );
    assert!(!me.admin);
    assert!(c.whoami().await.unwrap().admin);
    let job = acme_client
        .enqueue(NewJob::new("q", "k", Value::Null))
        .await
        .unwrap()
        .job;
    // Walls: the admin's tenant does not see acme's job.
    assert!(c.get_job(job.id).await.unwrap_err().is_not_found());
    let names: Vec<String> = c
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    for name in ["default", "other", "acme"] {
        assert!(names.iter().any(|n| n == name), "{names:?}");
    }
    let err = c.create_tenant("acme").await.unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert!(matches!(
        tether_core::Error::from(err),
        tether_core::Error::AlreadyExists(_)
    ));

    let key = c
        .create_key(
            acme.tenant.id,
            &NewKey {
                name: Some("ci".into()),
                admin: false,
            },
        )
        .await
        .unwrap();
    let second = s.client(&key.api_key);
    assert_eq!(second.get_job(job.id).await.unwrap().id, job.id);
    // Admin keys only in the default tenant.
    let err = c
        .create_key(
            acme.tenant.id,
            &NewKey {
                name: None,
                admin: true,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    // Revoked at once.
    c.revoke_key(key.key_id).await.unwrap();
    let err = second.get_job(job.id).await.unwrap_err();
    assert!(err.is_unauthenticated(), "{err}");
    assert_eq!(err.status(), Some(401));
    // Listed, oldest first, the revoked one with its instant.
    let keys = c.list_keys(acme.tenant.id).await.unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(
        (keys[1].id, keys[1].name.as_deref()),
        (key.key_id, Some("ci"))
    );
    assert!(keys[1].revoked_at.is_some() && keys[0].revoked_at.is_none());
    assert!(keys.iter().all(|k| !k.admin));
    let err = c.list_keys(Uuid::new_v4()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    // Unknown tenant: a not_found that is not a job's.
    let err = c
        .create_key(Uuid::new_v4(), &NewKey::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    assert!(matches!(
        tether_core::Error::from(err),
        tether_core::Error::NotFound(_)
    ));
    // A second admin key for default works on admin routes.
    let default_id = c
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "default")
        .unwrap()
        .id;
    let admin2 = c
        .create_key(
            default_id,
            &NewKey {
                name: Some("ops".into()),
                admin: true,
            },
        )
        .await
        .unwrap();
    s.client(&admin2.api_key).list_tenants().await.unwrap();
    // Suspension: acme's key is refused (403) until it is resumed.
    assert_eq!(acme.tenant.suspended_at, None);
    let suspended = c.suspend_tenant(acme.tenant.id).await.unwrap();
    assert!(suspended.suspended_at.is_some());
    let refused = acme_client.whoami().await.unwrap_err();
    assert!(refused.is_permission_denied(), "{refused}");
    assert!(refused.to_string().contains("suspended"), "{refused}");
    let listed = c.list_tenants().await.unwrap();
    let acme_listed = listed.iter().find(|t| t.id == acme.tenant.id).unwrap();
    assert_eq!(acme_listed.suspended_at, suspended.suspended_at);
    let resumed = c.resume_tenant(acme.tenant.id).await.unwrap();
    assert_eq!(resumed.suspended_at, None);
    acme_client.whoami().await.unwrap();
    let err = c.suspend_tenant(default_id).await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(acme_client
        .suspend_tenant(acme.tenant.id)
        .await
        .unwrap_err()
        .is_permission_denied());
}

async fn metrics_need_an_admin_key_and_show_queues(db: &TestDb) {
    let s = start(db).await;
    s.admin
        .enqueue(NewJob::new("mq", "k", Value::Null))
        .await
        .unwrap();
    s.other
        .enqueue(NewJob::new("oq", "k", Value::Null))
        .await
        .unwrap();
    let text = s.admin.metrics().await.unwrap();
    let line = |tenant: &str, queue: &str| {
        format!("tether_queue_jobs{{tenant=\"{tenant}\",queue=\"{queue}\",state=\"queued\"}} 1")
    };
    // Every tenant's queues, for the admin.
    for want in [line("default", "mq"), line("other", "oq")] {
        assert!(text.lines().any(|l| l == want), "no {want:?} in:\n{text}");
    }
    assert!(text.contains("tether_queue_oldest_ready_age_seconds"));
    assert!(text.contains("tether_queue_expired_leases"));
    let err = s.other.metrics().await.unwrap_err();
    assert!(err.is_permission_denied(), "{err}");
    assert!(s
        .client("tth_nope")
        .metrics()
        .await
        .unwrap_err()
        .is_unauthenticated());
}

async fn openapi_document_is_served(db: &TestDb) {
    let s = start(db).await;
    // No key needed.
    let doc = s.client("no key").openapi().await.unwrap();
    for path in ["/v1/jobs", "/v1/queues/{queue}/claim", "/v1/jobs/heartbeat"] {
        assert!(doc["paths"][path].is_object(), "no {path} in the document");
    }
}

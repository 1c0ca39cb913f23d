//! The typed errors.

use super::*;

tether_conformance::both_backends!(typed_errors,);

async fn typed_errors(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    use tether_core::Error as Core;

    // 401: a bad key.
    let err = s.client("tth_nope").list_queues().await.unwrap_err();
    assert!(
        matches!(&err, Error::Api { status: 401, code: ErrorCode::Unauthenticated, message } if !message.is_empty()),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(matches!(Core::from(err), Core::Unauthenticated));

    // 403: a non-admin key on admin routes.
    let err = s.other.create_tenant("x").await.unwrap_err();
    assert!(err.is_permission_denied(), "{err}");
    assert_eq!(err.status(), Some(403));
    assert!(s
        .other
        .list_tenants()
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .create_key(s.other_id, &NewKey::default())
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .revoke_key(Uuid::new_v4())
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .list_keys(s.other_id)
        .await
        .unwrap_err()
        .is_permission_denied());

    // 404: another tenant's job, on every job route.
    let id = c
        .enqueue(NewJob::new("te", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let err = s.other.get_job(id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::JobNotFound(x) if x == id));
    assert!(s.other.cancel(id).await.unwrap_err().is_not_found());
    assert!(s.other.replay(id).await.unwrap_err().is_not_found());
    assert!(s.other.events(id).await.unwrap_err().is_not_found());
    assert_eq!(c.get_job(id).await.unwrap().state, JobState::Queued);

    // 409 lease_lost: a token that does not own the job.
    let cj = c.claim("te", &ClaimOptions::new("w1")).await.unwrap();
    let wrong = LeaseToken(Uuid::new_v4());
    let err = c.complete(id, wrong, None).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::LeaseLost,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::LeaseLost(x) if x == id));
    let err = c.snooze(id, wrong, 0).await.unwrap_err();
    assert!(matches!(err.into_core_for_job(id), Core::LeaseLost(x) if x == id));
    // Another tenant's running job with the right token: still 404.
    let err = s
        .other
        .complete(id, cj[0].lease_token, None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // 409 invalid_state: cancelling a finished job.
    c.complete(id, cj[0].lease_token, None).await.unwrap();
    let err = c.cancel(id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::InvalidState,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        matches!(Core::from(err), Core::InvalidState { id: x, state: JobState::Succeeded, .. } if x == id)
    );

    // 400 invalid_argument, with a message naming the field.
    let err = c
        .enqueue(NewJob::new("bad queue!", "k", Value::Null))
        .await
        .unwrap_err();
    match &err {
        Error::Api {
            status: 400,
            code: ErrorCode::InvalidArgument,
            message,
        } => assert!(message.contains("queue"), "{message}"),
        other => panic!("{other:?}"),
    }
    let core = Core::from(err);
    // (The server names it `jobs[0].queue` even for a single enqueue.)
    assert!(
        matches!(&core, Core::Invalid { field, .. } if field.ends_with("queue")),
        "{core:?}"
    );
    let err = c
        .enqueue(NewJob::new("q", "k", Value::Null).priority(500))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    let err = c
        .claim("q", &ClaimOptions::new("w1").wait_ms(60_000))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("wait_ms"),
        "{err}"
    );
    let err = c
        .enqueue(NewJob::new("q", "k", Value::Null).run_at(RunAt::Delay(-5)))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");

    // 413: a payload above the 1 MiB limit.
    let big = "x".repeat(1_100_000);
    let err = c
        .enqueue(NewJob::new("q", "k", json!(big)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PayloadTooLarge), "{err}");
    assert_eq!(err.status(), Some(413));
    assert!(!err.is_retryable());

    // Refused before sending: names no URL can carry.
    let err = c.get_queue("..").await.unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    assert!(matches!(
        HttpClient::new("not a url", "k").unwrap_err(),
        Error::Invalid { .. }
    ));
    assert!(matches!(
        HttpClient::new("ftp://127.0.0.1/", "k").unwrap_err(),
        Error::Invalid { .. }
    ));
    assert!(matches!(
        HttpClient::new(&s.base, "bad\nkey").unwrap_err(),
        Error::Invalid { .. }
    ));

    // Transport: nobody listens there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let down = HttpClient::builder(&format!("http://{closed}"), "k")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = down.healthz().await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(matches!(Core::from(err), Core::Unavailable(_)));
}

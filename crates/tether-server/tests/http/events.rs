//! The live event stream, `GET /v1/events`: what a message holds, resuming
//! with `Last-Event-ID` and `after` (exactly the events after the cursor),
//! filters and their errors, the tenant wall, the per-tenant cap on open
//! streams, and the gap message after retention.

use common::{Message, SseReader};

use super::*;

tether_conformance::both_backends!(
    a_stream_carries_each_event_and_resumes_after_its_cursor,
    stream_filters_narrow_it_and_bad_ones_are_400s,
    another_tenants_events_never_reach_a_stream,
    a_tenant_holds_a_limited_number_of_streams,
    events_removed_before_a_stream_read_them_are_a_gap,
);

const WAIT: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(400);

async fn next(r: &mut SseReader) -> Message {
    r.next(WAIT).await.expect("a message within 10 s")
}

async fn finish(c: &Ctx, queue: &str, want: &str) {
    let (id, token) = c.claim_one(queue).await;
    assert_eq!(id, want);
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
}

async fn a_stream_carries_each_event_and_resumes_after_its_cursor(db: &TestDb) {
    let c = setup(db).await;
    let mut s = c
        .stream("/v1/events", &c.admin, None)
        .await
        .expect("a stream");
    let id = c.enqueue("q", "send").await;
    finish(&c, "q", &id).await;
    let got: Vec<Message> = vec![next(&mut s).await, next(&mut s).await, next(&mut s).await];
    let names: Vec<&str> = got.iter().map(|m| m.event.as_str()).collect();
    assert_eq!(names, ["enqueued", "claimed", "succeeded"]);
    for m in &got {
        assert_eq!(m.data["job_id"], id.as_str());
        assert_eq!(m.data["queue"], "q");
        assert_eq!(m.data["kind"], "send");
        assert_eq!(m.data["event"], m.event.as_str());
        assert_eq!(
            m.id.as_deref(),
            m.data["cursor"].as_str(),
            "the id is the cursor"
        );
        assert!(is_rfc3339_utc(&m.data["at"]), "{}", m.data);
    }
    assert_eq!(got[1].data["state"], "running");
    assert_eq!(got[1].data["worker_id"], "w1");
    assert_eq!(got[2].data["state"], "succeeded");
    assert!(s.next(QUIET).await.is_none(), "nothing more");
    drop(s);

    // Resuming after the `claimed` message: exactly what followed it.
    let after_claim = got[1].id.clone().unwrap();
    let second = c.enqueue("q", "send").await;
    let mut s = c
        .stream("/v1/events", &c.admin, Some(&after_claim))
        .await
        .expect("a stream");
    let a = next(&mut s).await;
    let b = next(&mut s).await;
    assert_eq!(
        (a.event.as_str(), a.data["job_id"].as_str()),
        ("succeeded", Some(id.as_str()))
    );
    assert_eq!(
        (b.event.as_str(), b.data["job_id"].as_str()),
        ("enqueued", Some(second.as_str()))
    );
    assert!(s.next(QUIET).await.is_none(), "nothing twice");
    drop(s);
    // `after` does the same as the header.
    let uri = format!(
        "/v1/events?after={}",
        urlencode(got[2].id.as_deref().unwrap())
    );
    let mut s = c.stream(&uri, &c.admin, None).await.expect("a stream");
    let only = next(&mut s).await;
    assert_eq!(only.data["job_id"], second.as_str());
    // And it stays live: a new event arrives on the open stream.
    finish(&c, "q", &second).await;
    assert_eq!(next(&mut s).await.event, "claimed");
    assert_eq!(next(&mut s).await.event, "succeeded");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn stream_filters_narrow_it_and_bad_ones_are_400s(db: &TestDb) {
    let c = setup(db).await;
    let a = c.enqueue("q", "k").await;
    let b = c.enqueue("other", "k").await;
    // From the start of this test's history: the first event's cursor is
    // what a stream opened before would have; take it from an open stream.
    let mut all = c.stream("/v1/events", &c.admin, None).await.unwrap();
    c.post(&format!("/v1/jobs/{a}/cancel"), json!({}))
        .await
        .expect(200);
    c.post(&format!("/v1/jobs/{b}/cancel"), json!({}))
        .await
        .expect(200);
    let first = next(&mut all).await;
    assert_eq!(first.data["job_id"], a.as_str());
    drop(all);
    let c2 = c.enqueue("q", "k").await;

    let read = |uri: String| {
        let c = &c;
        async move {
            let mut s = c.stream(&uri, &c.admin, None).await.expect("a stream");
            let mut got = Vec::new();
            while let Some(m) = s.next(QUIET).await {
                got.push((m.data["job_id"].as_str().unwrap().to_owned(), m.event));
            }
            got
        }
    };
    // Everything after a's cancel, through filters.
    let after = urlencode(first.id.as_deref().unwrap());
    assert_eq!(
        read(format!("/v1/events?after={after}&queue=other")).await,
        [(b.clone(), "cancelled".to_owned())]
    );
    assert_eq!(
        read(format!("/v1/events?after={after}&job_id={c2}")).await,
        [(c2.clone(), "enqueued".to_owned())]
    );
    assert_eq!(
        read(format!(
            "/v1/events?after={after}&event=enqueued&event=cancelled&queue=q"
        ))
        .await,
        [(c2.clone(), "enqueued".to_owned())]
    );
    assert_eq!(
        read(format!("/v1/events?after={after}&event=cancelled,enqueued")).await,
        [
            (b.clone(), "cancelled".to_owned()),
            (c2.clone(), "enqueued".to_owned())
        ]
    );

    for (uri, field) in [
        ("/v1/events?job_id=nope", "job_id"),
        ("/v1/events?workflow_id=nope", "workflow_id"),
        ("/v1/events?event=exploded", "event"),
        ("/v1/events?after=nonsense", "after"),
        ("/v1/events?colour=blue", "colour"),
    ] {
        let err = c.stream(uri, &c.admin, None).await.err().expect("refused");
        err.expect_error(400, "invalid_argument");
        assert!(
            err.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(field),
            "{}",
            err.body
        );
    }
    let err = c
        .stream("/v1/events", &c.admin, Some("p.x"))
        .await
        .err()
        .expect("refused");
    err.expect_error(400, "invalid_argument");
}

async fn another_tenants_events_never_reach_a_stream(db: &TestDb) {
    let c = setup(db).await;
    let mut theirs = c.stream("/v1/events", &c.other, None).await.unwrap();
    let mut mine = c.stream("/v1/events", &c.admin, None).await.unwrap();
    let id = c.enqueue("q", "k").await;
    assert_eq!(next(&mut mine).await.data["job_id"], id.as_str());
    assert!(theirs.next(QUIET).await.is_none(), "another tenant's event");
    let other_job = c
        .call(
            "POST",
            "/v1/jobs",
            Some(&c.other),
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    let other_id = other_job.expect(201)["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(next(&mut theirs).await.data["job_id"], other_id.as_str());
    assert!(mine.next(QUIET).await.is_none());
}

async fn a_tenant_holds_a_limited_number_of_streams(db: &TestDb) {
    let c = setup_with(
        db,
        ServerConfig {
            max_event_streams_per_tenant: 1,
            ..ServerConfig::default()
        },
    )
    .await;
    let first = c.stream("/v1/events", &c.admin, None).await.unwrap();
    let refused = c
        .stream("/v1/events", &c.admin, None)
        .await
        .err()
        .expect("429");
    refused.expect_error(429, "too_many_requests");
    // Another tenant has places of its own.
    let _theirs = c
        .stream("/v1/events", &c.other, None)
        .await
        .expect("another tenant's");
    drop(first);
    c.stream("/v1/events", &c.admin, None)
        .await
        .expect("a place again");
}

async fn events_removed_before_a_stream_read_them_are_a_gap(db: &TestDb) {
    let c = setup(db).await;
    let mut s = c.stream("/v1/events", &c.admin, None).await.unwrap();
    let a = c.enqueue("q", "k").await;
    let first = next(&mut s).await;
    drop(s);
    // The job ends and retention removes it, history and all, before the
    // client comes back.
    c.post(&format!("/v1/jobs/{a}/cancel"), json!({}))
        .await
        .expect(200);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(db.engine.prune_finished(0, 100).await.expect("prune"), 1);
    let b = c.enqueue("q", "k").await;
    // Back on a server that was not running meanwhile (a restart, another
    // replica): none of it in its memory, so it reads the store. (The same
    // server would still hold the removed events in memory and send them:
    // nothing lost, no gap.)
    let c = setup(db).await;
    let mut s = c
        .stream("/v1/events", &c.admin, first.id.as_deref())
        .await
        .unwrap();
    let gap = next(&mut s).await;
    assert_eq!(gap.event, "gap");
    assert_eq!(gap.data["oldest"].as_str(), gap.id.as_deref());
    let after = next(&mut s).await;
    assert_eq!(
        (after.event.as_str(), after.data["job_id"].as_str()),
        ("enqueued", Some(b.as_str()))
    );
}

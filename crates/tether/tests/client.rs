//! The façade: a URL picks the backend, typed jobs round-trip, tenants stay
//! apart, and enqueue_in is PostgreSQL-only.

use serde::{Deserialize, Serialize};
use serde_json::json;
use tether::{Client, Error, JobArgs, JobState, NewJob, NewWorkflow, WorkflowState};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Resize {
    image: String,
    width: u32,
}

impl JobArgs for Resize {
    const KIND: &'static str = "resize";
    const QUEUE: &'static str = "images";
}

fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tether-client-{}-{}-{name}",
        std::process::id(),
        uuid_like()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join("jobs.db")
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

async fn typed_round_trip(client: &Client) {
    let args = Resize {
        image: "cat.png".into(),
        width: 640,
    };
    let enqueued = client.enqueue_args(&args).await.expect("enqueue");
    assert!(enqueued.created);
    assert_eq!(enqueued.job.queue, "images");
    assert_eq!(enqueued.job.kind, "resize");
    let stored = client
        .engine()
        .get(client.tenant(), enqueued.job.id)
        .await
        .expect("stored");
    let back: Resize = serde_json::from_value(stored.payload).expect("payload decodes");
    assert_eq!(back, args);

    let prioritized = client
        .enqueue(
            NewJob::for_args(&args)
                .expect("serializes")
                .queue("images-hi")
                .priority(9),
        )
        .await
        .expect("enqueue with settings");
    assert_eq!(prioritized.job.queue, "images-hi");
    assert_eq!(prioritized.job.priority, 9);

    // Another tenant sees none of it.
    let other = client.with_tenant("someone-else").expect("tenant");
    assert!(matches!(
        other.engine().get(other.tenant(), enqueued.job.id).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(client.with_tenant("not a name").is_err());
}

/// A workflow through the façade: one graph enqueued, read whole.
async fn workflow_round_trip(client: &Client) {
    let new = NewWorkflow {
        name: "publish".into(),
        idempotency_key: Some("post-1".into()),
    };
    let jobs = [
        NewJob::new("wf", "render", json!(1)),
        NewJob::new("wf", "publish", json!(2)).after_entry(0),
    ];
    let made = client
        .enqueue_workflow(&new, &jobs)
        .await
        .expect("workflow");
    assert!(made.created);
    assert_eq!(made.jobs[1].job.workflow_id, Some(made.workflow.id));
    let again = client.enqueue_workflow(&new, &jobs).await.expect("again");
    assert!(!again.created);
    assert_eq!(again.workflow.id, made.workflow.id);
    let graph = client
        .engine()
        .get_workflow(client.tenant(), made.workflow.id)
        .await
        .expect("read");
    assert_eq!(graph.workflow.state, WorkflowState::Running);
    assert_eq!(graph.jobs[1].depends_on, vec![made.jobs[0].job.id]);
}

#[tokio::test]
async fn sqlite_by_path_and_by_url() {
    let path = temp_path("sqlite");
    let by_path = Client::connect(path.to_str().expect("utf-8 path"))
        .await
        .expect("open by path");
    typed_round_trip(&by_path).await;
    workflow_round_trip(&by_path).await;
    let by_url = Client::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open by url");
    let listed = by_url
        .engine()
        .list(by_url.tenant(), &Default::default())
        .await
        .expect("list");
    assert_eq!(listed.jobs.len(), 4, "the same file, seen through the URL");
    assert!(Client::connect("sqlite://").await.is_err());
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_by_url_with_transactional_enqueue() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("postgres url");
    let client = Client::connect(&url).await.expect("connect");
    typed_round_trip(&client).await;
    workflow_round_trip(&client).await;

    let pool = sqlx::PgPool::connect(&url).await.expect("app pool");
    let mut tx = pool.begin().await.expect("begin");
    let rolled = client
        .enqueue_in(&mut tx, &[NewJob::new("q", "k", json!(1))])
        .await
        .expect("enqueue in tx");
    tx.rollback().await.expect("rollback");
    let mut tx = pool.begin().await.expect("begin");
    let kept = client
        .enqueue_in(&mut tx, &[NewJob::new("q", "k", json!(2))])
        .await
        .expect("enqueue in tx");
    tx.commit().await.expect("commit");
    assert!(matches!(
        client.engine().get(client.tenant(), rolled[0].job.id).await,
        Err(Error::JobNotFound(_))
    ));
    let job = client
        .engine()
        .get(client.tenant(), kept[0].job.id)
        .await
        .expect("committed");
    assert_eq!(job.state, JobState::Queued);

    // A graph of typed jobs, in the caller's transaction: all or nothing.
    let small = Resize {
        image: "cat.png".into(),
        width: 64,
    };
    let graph = [
        NewJob::for_args(&small).expect("serializes"),
        NewJob::for_args(&small)
            .expect("serializes")
            .after_entry(0)
            .after(job.id),
    ];
    let mut tx = pool.begin().await.expect("begin");
    let made = client
        .enqueue_in(&mut tx, &graph)
        .await
        .expect("graph in tx");
    tx.commit().await.expect("commit");
    assert_eq!(made[1].job.state, JobState::Waiting);
    assert_eq!(made[1].job.depends_on, vec![made[0].job.id, job.id]);
    let mut tx = pool.begin().await.expect("begin");
    let unknown = NewJob::new("q", "k", json!(3)).after(made[0].job.id).after(
        "0190d000-0000-7000-8000-000000000001"
            .parse()
            .expect("a uuid"),
    );
    assert!(matches!(
        client.enqueue_in(&mut tx, &[unknown]).await,
        Err(Error::Invalid { .. })
    ));
    tx.rollback().await.expect("rollback");
    pool.close().await;
    db.cleanup().await;
}

#[tokio::test]
async fn enqueue_in_is_refused_on_sqlite() {
    let path = temp_path("refuse");
    let client = Client::connect(path.to_str().expect("utf-8"))
        .await
        .expect("open");
    // Any PostgreSQL connection will do: the call must refuse before using it.
    let url = std::env::var("TETHER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| tether_conformance::DEFAULT_DATABASE_URL.to_owned());
    let mut conn: sqlx::PgConnection = sqlx::Connection::connect(&url)
        .await
        .expect("PostgreSQL for the refusal test");
    let err = client
        .enqueue_in(&mut conn, &[NewJob::new("q", "k", json!(null))])
        .await
        .expect_err("SQLite client refuses enqueue_in");
    assert_eq!(err.code(), "invalid_argument");
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}

//! Enqueues: one job, a typed job, a batch.

use super::*;

impl HttpClient {
    /// `POST /v1/jobs`: enqueues one job. [`Enqueued::created`] is `false`
    /// when an existing job with the same idempotency key (or active unique
    /// key) was returned instead.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued> {
        let call = self.call(Method::POST, &["v1", "jobs"])?;
        self.json(call, Some(&body(&wire::enqueue_request(&job))))
            .await
    }

    /// Enqueues a typed job on its kind's default queue. For other settings
    /// build it with [`NewJob::for_args`] and call [`HttpClient::enqueue`].
    pub async fn enqueue_args<J: JobArgs>(&self, args: &J) -> Result<Enqueued> {
        let job = NewJob::for_args(args).map_err(|e| Error::invalid("payload", e.to_string()))?;
        self.enqueue(job).await
    }

    /// `POST /v1/jobs/batch`: enqueues 1–1000 jobs all-or-nothing; answers
    /// in request order.
    pub async fn enqueue_batch(&self, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let jobs = jobs.iter().map(wire::enqueue_request).collect();
        let env: BatchEnqueueResponse = self
            .post(
                &["v1", "jobs", "batch"],
                Some(&body(&BatchEnqueueRequest {
                    jobs,
                    workflow: None,
                })),
            )
            .await?;
        Ok(env.results)
    }

    // ----- working ----------------------------------------------------------
}

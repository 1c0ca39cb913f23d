//! Schedules: create, read, change, delete, trigger, runs, cron previews.

use super::*;

impl HttpClient {
    /// `POST /v1/schedules`: creates a schedule; its first run is the first
    /// fire instant after now. A name the tenant already uses is 409
    /// `already_exists`; a bad expression or time zone is 400.
    pub async fn create_schedule(&self, spec: &ScheduleSpec) -> Result<Schedule> {
        let env: ScheduleResponse = self
            .post(
                &["v1", "schedules"],
                Some(&body(&CreateScheduleBody::from(spec.clone()))),
            )
            .await?;
        Ok(env.schedule)
    }

    /// `PUT /v1/schedules/{name}`: makes the tenant's schedule named
    /// `spec.name` exactly `spec`, creating it or replacing its definition
    /// (its id and runs kept), or writing nothing when it already is: the
    /// call for schedules declared in code, safe on every deploy.
    pub async fn ensure_schedule(&self, spec: &ScheduleSpec) -> Result<(Schedule, PutOutcome)> {
        let call = self.call(Method::PUT, &["v1", "schedules", &spec.name])?;
        let env: PutScheduleResponse = self
            .json(call, Some(&body(&PutScheduleBody::from(spec.clone()))))
            .await?;
        Ok((env.schedule, env.outcome))
    }

    /// `GET /v1/schedules`: every schedule of the tenant, by name.
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>> {
        let env: ScheduleListResponse = self.get(&["v1", "schedules"]).await?;
        Ok(env.schedules)
    }

    /// `GET /v1/schedules/{id}`.
    pub async fn get_schedule(&self, id: Uuid) -> Result<Schedule> {
        let id = id.to_string();
        let env: ScheduleResponse = self.get(&["v1", "schedules", &id]).await?;
        Ok(env.schedule)
    }

    /// `PATCH /v1/schedules/{id}`: changes the fields the patch sets
    /// (`payload: Some(Value::Null)` sets the payload to `null`); the server
    /// recomputes `next_run_at` from now.
    pub async fn patch_schedule(&self, id: Uuid, patch: &SchedulePatch) -> Result<Schedule> {
        let id = id.to_string();
        let call = self.call(Method::PATCH, &["v1", "schedules", &id])?;
        let env: ScheduleResponse = self
            .json(call, Some(&body(&PatchScheduleBody::from(patch.clone()))))
            .await?;
        Ok(env.schedule)
    }

    /// `DELETE /v1/schedules/{id}`: deletes a schedule and its runs (the
    /// jobs it enqueued stay).
    pub async fn delete_schedule(&self, id: Uuid) -> Result<()> {
        let id = id.to_string();
        let call = self.call(Method::DELETE, &["v1", "schedules", &id])?;
        let req = self.request(&call, true);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /v1/schedules/{id}/runs`: the newest runs, newest first.
    pub async fn schedule_runs(&self, id: Uuid) -> Result<Vec<ScheduleRun>> {
        let id = id.to_string();
        let env: ScheduleRunListResponse = self.get(&["v1", "schedules", &id, "runs"]).await?;
        Ok(env.runs)
    }

    /// `POST /v1/schedules/{id}/trigger`: runs the schedule now, outside its
    /// timetable; answers the job it enqueued.
    pub async fn trigger_schedule(&self, id: Uuid) -> Result<Job> {
        let id = id.to_string();
        let env: JobResponse = self
            .post(&["v1", "schedules", &id, "trigger"], None)
            .await?;
        Ok(env.job)
    }

    /// `GET /v1/cron/preview`: the next fire instants of an expression,
    /// strictly after [`CronPreview::from`] (default now), computed by the
    /// scheduler's own code.
    pub async fn cron_preview(&self, preview: &CronPreview) -> Result<Vec<DateTime<Utc>>> {
        let call = self.call(Method::GET, &["v1", "cron", "preview"])?;
        let req = self.request(&call, true).query(&preview.query());
        let bytes = self.send(req).await?;
        let env: CronPreviewResponse = decode(&call, &bytes)?;
        Ok(env.times)
    }

    // ----- tenants and keys (admin scope) -----------------------------------
}

//! The service routes: health, readiness, metrics, the OpenAPI document.

use super::*;

impl HttpClient {
    /// `GET /healthz` (no key): `Ok` while the server process is alive.
    pub async fn healthz(&self) -> Result<()> {
        self.probe("healthz").await
    }

    /// `GET /readyz` (no key): `Ok` while the server reaches its database;
    /// 503 `unavailable` otherwise.
    pub async fn readyz(&self) -> Result<()> {
        self.probe("readyz").await
    }

    async fn probe(&self, route: &str) -> Result<()> {
        let call = self.call(Method::GET, &[route])?;
        let req = self.request(&call, false);
        self.send(req).await?;
        Ok(())
    }

    /// `GET /metrics` (admin key): the Prometheus text of every tenant's
    /// queues.
    pub async fn metrics(&self) -> Result<String> {
        let call = self.call(Method::GET, &["metrics"])?;
        let req = self.request(&call, true);
        let bytes = self.send(req).await?;
        String::from_utf8(bytes).map_err(|e| Error::Decode {
            route: call.route,
            source: serde::de::Error::custom(e),
        })
    }

    /// `GET /openapi.json` (no key): the machine-readable description of
    /// the API.
    pub async fn openapi(&self) -> Result<Value> {
        let call = self.call(Method::GET, &["openapi.json"])?;
        let req = self.request(&call, false);
        let bytes = self.send(req).await?;
        decode(&call, &bytes)
    }
}

//! How the store's statements run: straight on PostgreSQL, or through a
//! transaction-pooling proxy (PgBouncer with `pool_mode = transaction`).
//!
//! Behind such a proxy a client's statements reach a different server
//! connection in every transaction, so two things sqlx does by default break:
//! named prepared statements (cached per client connection, but they live on
//! one server connection), and running a statement with parameters outside a
//! transaction (sqlx prepares it and binds it in two protocol exchanges, and
//! the proxy may hand the second to another server). In pooled mode every
//! statement is therefore unnamed, and one on the pool runs in a transaction
//! of its own. Every statement of the store goes through [`Pool`], [`Conn`]
//! or [`Tx`], so the choice is made in one place.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Error, Execute, Executor, PgConnection, PgPool, Postgres};

/// A statement run unnamed (never cached on the connection).
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }
    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }
    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.0.take_arguments()
    }
    fn persistent(&self) -> bool {
        false
    }
}

/// The store's connection pool, with how its statements must run.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    raw: PgPool,
    /// Behind a transaction pooler: unnamed statements, each in a transaction.
    pooled: bool,
}

impl Pool {
    pub(crate) fn new(raw: PgPool, pooled: bool) -> Pool {
        Pool { raw, pooled }
    }

    /// The sqlx pool, for what is not a statement of the store (LISTEN,
    /// closing, the public accessor).
    pub(crate) fn raw(&self) -> &PgPool {
        &self.raw
    }

    /// Whether statements go through a transaction pooler.
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    /// Starts a transaction.
    pub(crate) async fn begin(&self) -> Result<Tx<'static>, Error> {
        Ok(Tx {
            inner: begin_detached(&self.raw).await?,
            unnamed: self.pooled,
        })
    }
}

/// Starts a transaction on a connection of `pool` in a task of its own.
///
/// sqlx's `BEGIN` is not cancel-safe on PostgreSQL: a future dropped while
/// the `BEGIN` is in flight leaves the session inside a transaction that
/// nothing rolls back, and the pool hands that connection to the next
/// caller, whose statements then run inside it: uncommitted until some
/// later `COMMIT`, holding their locks, and stamped with the stale
/// transaction's `now()`. A request is dropped mid-flight whenever its
/// client disconnects, so this happened under load. The task finishes the
/// `BEGIN` whether or not its caller still waits; a transaction nobody
/// takes is dropped there, which rolls it back before the connection is
/// reused.
async fn begin_detached(pool: &PgPool) -> Result<sqlx::Transaction<'static, Postgres>, Error> {
    let pool = pool.clone();
    match tokio::spawn(async move { pool.begin().await }).await {
        Ok(begun) => begun,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down.
        Err(_) => Err(Error::PoolClosed),
    }
}

impl<'p> Executor<'p> for &'p Pool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return self.raw.fetch_many(query);
        }
        let pool = &self.raw;
        futures_util::stream::once(async move {
            let mut tx = begin_detached(pool).await?;
            let items: Vec<_> = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
            tx.commit().await?;
            Ok::<_, Error>(futures_util::stream::iter(items.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if !self.pooled {
            return self.raw.fetch_optional(query);
        }
        let pool = &self.raw;
        Box::pin(async move {
            let mut tx = begin_detached(pool).await?;
            let row = (&mut *tx).fetch_optional(Unnamed(query)).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, Error>>
    where
        'p: 'e,
    {
        self.raw.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, Error>>
    where
        'p: 'e,
    {
        self.raw.describe(sql)
    }
}

/// One connection (a pool's, a transaction's or the caller's), with how its
/// statements must run.
#[derive(Debug)]
pub(crate) struct Conn<'c> {
    raw: &'c mut PgConnection,
    unnamed: bool,
}

impl<'c> Conn<'c> {
    /// A connection straight to PostgreSQL (e.g. the caller's own).
    pub(crate) fn direct(raw: &'c mut PgConnection) -> Conn<'c> {
        Conn {
            raw,
            unnamed: false,
        }
    }

    /// A transaction on this connection (a savepoint inside one).
    pub(crate) async fn begin(&mut self) -> Result<Tx<'_>, Error> {
        Ok(Tx {
            inner: sqlx::Transaction::begin(&mut *self.raw, None).await?,
            unnamed: self.unnamed,
        })
    }
}

impl<'c, 'a> Executor<'c> for &'c mut Conn<'a> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.unnamed {
            self.raw.fetch_many(Unnamed(query))
        } else {
            self.raw.fetch_many(query)
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.unnamed {
            self.raw.fetch_optional(Unnamed(query))
        } else {
            self.raw.fetch_optional(query)
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, Error>>
    where
        'c: 'e,
    {
        self.raw.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, Error>>
    where
        'c: 'e,
    {
        self.raw.describe(sql)
    }
}

/// A transaction, with how its statements must run: `tx.conn()` is what
/// statements execute on.
#[derive(Debug)]
pub(crate) struct Tx<'c> {
    inner: sqlx::Transaction<'c, Postgres>,
    unnamed: bool,
}

impl Tx<'_> {
    /// The transaction's connection, to run statements on.
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        Conn {
            raw: &mut self.inner,
            unnamed: self.unnamed,
        }
    }

    /// Commits.
    pub(crate) async fn commit(self) -> Result<(), Error> {
        self.inner.commit().await
    }

    /// Rolls back (dropping it does too, at the connection's next use).
    pub(crate) async fn rollback(self) -> Result<(), Error> {
        self.inner.rollback().await
    }

    /// Commits when `out` is a success, rolls back at once otherwise, and
    /// answers `out`. A transaction that locked rows must not wait for
    /// its connection's next use to let them go (sqlx rolls back a dropped
    /// one only then, in a task of its own): a claim meanwhile would skip
    /// the rows as taken.
    pub(crate) async fn finish<T>(self, out: tether_core::Result<T>) -> tether_core::Result<T> {
        use crate::rows::Db;
        match out {
            Ok(value) => {
                self.commit().await.db()?;
                Ok(value)
            }
            Err(e) => {
                // The error that ended it is the one to report.
                let _ = self.rollback().await;
                Err(e)
            }
        }
    }
}

/// Where a store function's statements run: on the pool, each statement on
/// its own, or on one transaction's connection. Functions written over it
/// serve a route alone and inside a larger transaction (a claim carrying
/// the last batch's reports) without being written twice.
#[derive(Debug)]
pub(crate) enum Runner<'a> {
    /// Each statement on its own, as [`Pool`] runs it.
    Pool(&'a Pool),
    /// On one connection (a transaction's).
    Conn(Conn<'a>),
}

impl<'c, 'a> Executor<'c> for &'c mut Runner<'a> {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self {
            Runner::Pool(pool) => (*pool).fetch_many(query),
            Runner::Conn(conn) => conn.fetch_many(query),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self {
            Runner::Pool(pool) => (*pool).fetch_optional(query),
            Runner::Conn(conn) => conn.fetch_optional(query),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, Error>>
    where
        'c: 'e,
    {
        match self {
            Runner::Pool(pool) => (*pool).prepare_with(sql, parameters),
            Runner::Conn(conn) => conn.prepare_with(sql, parameters),
        }
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, Error>>
    where
        'c: 'e,
    {
        match self {
            Runner::Pool(pool) => (*pool).describe(sql),
            Runner::Conn(conn) => conn.describe(sql),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::postgres::PgPoolOptions;

    use super::Pool;

    /// A transaction begun for a caller that is gone before the `BEGIN`
    /// answers (a request whose client disconnected) is rolled back before
    /// its connection serves anyone else: on a pool of one connection,
    /// dropped at every point of the round trip, the next statements each
    /// run in a transaction of their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_begin_whose_caller_is_gone_leaves_no_transaction_open() {
        let db = tether_conformance::postgres().await;
        let raw = PgPoolOptions::new()
            .max_connections(1)
            .connect(&db.postgres_url().unwrap())
            .await
            .unwrap();
        let pool = Pool::new(raw, false);
        for i in 0..400u64 {
            let begin = tokio::time::timeout(Duration::from_micros(i % 200), pool.begin());
            let _ = begin.await;
            // An xid taken by one statement outlives it only inside a
            // transaction block.
            sqlx::query("SELECT pg_current_xact_id()")
                .execute(&pool.raw)
                .await
                .unwrap();
            let held: bool =
                sqlx::query_scalar("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
                    .fetch_one(&pool.raw)
                    .await
                    .unwrap();
            assert!(
                !held,
                "round {i}: the pool's connection is still inside a transaction"
            );
        }
    }
}

//! The feed of committed history events (see `model::feed`).

use super::*;

/// Most events one read of the feed returns.
pub const MAX_FEED_READ: u32 = 1_000;

impl Engine {
    /// A cursor after every event committed now: where a live reader
    /// starts.
    pub async fn feed_head(&self) -> Result<FeedCursor> {
        self.store.feed_head().await
    }

    /// Up to `limit` (1..=[`MAX_FEED_READ`]) events committed after
    /// `after` that pass `filter`; follow [`FeedPage::next`].
    pub async fn feed_read(
        &self,
        after: &FeedCursor,
        filter: &FeedFilter,
        limit: u32,
    ) -> Result<FeedPage> {
        if let Some(tenant) = &filter.tenant {
            validate::name("tenant", tenant)?;
        }
        if let Some(queue) = &filter.queue {
            validate::name("queue", queue)?;
        }
        if !(1..=MAX_FEED_READ).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be 1..={MAX_FEED_READ}"),
            ));
        }
        self.store.feed_read(after, filter, limit).await
    }
}

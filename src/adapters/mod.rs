//! Adapters to other crates' types, each behind its own feature.
//!
//! | feature | module | what it gives |
//! |---|---|---|
//! | `async-openai-0_43` | [`async_openai`] | [`Message`](crate::Message) ⇄ async-openai 0.43's chat request and response messages |
//!
//! The features carry the dependency's minor version: both crates are pre-1.0 and change
//! their APIs in minor releases, so an adapter for a later release gets a new feature and
//! can be built beside this one.

#[cfg(feature = "async-openai-0_43")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-openai-0_43")))]
pub mod async_openai;

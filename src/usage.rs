//! Token usage and exact cost, kept per completion.

use std::fmt;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const NANOS_PER_USD: u64 = 1_000_000_000;

/// An amount of money in US dollars, held as an integer number of nano-dollars
/// (10⁻⁹ USD).
///
/// Integers make cost exact: adding the cost of each completion and saving and loading the
/// session any number of times never drifts, as floating point would. A `u64` of
/// nano-dollars holds more than eighteen billion dollars.
///
/// # Examples
///
/// ```
/// use agent_session::Cost;
///
/// // $3 per million input tokens, 1,234 tokens:
/// let input = Cost::per_million_tokens(Cost::parse_usd("3")?, 1_234);
/// assert_eq!(input, Cost::parse_usd("0.003702")?);
///
/// let total = input + Cost::from_nano_usd(1);
/// assert_eq!(total.to_string(), "$0.003702001");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cost(u64);

impl Cost {
    /// No cost.
    pub const ZERO: Cost = Cost(0);

    /// A cost of `nano_usd` nano-dollars.
    #[must_use]
    pub const fn from_nano_usd(nano_usd: u64) -> Self {
        Cost(nano_usd)
    }

    /// The cost in nano-dollars.
    #[must_use]
    pub const fn as_nano_usd(self) -> u64 {
        self.0
    }

    /// Parses a decimal dollar amount such as `"0.0025"` or `"12"` exactly.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `usd` is not a plain non-negative decimal, has more than
    /// nine digits after the point, or is too large.
    pub fn parse_usd(usd: &str) -> Result<Self> {
        let invalid = |why: &str| Error::InvalidArgument {
            reason: format!("cost {usd:?} {why}"),
        };
        let (whole, fraction) = usd.split_once('.').unwrap_or((usd, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("is empty"));
        }
        if !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(invalid("is not a non-negative decimal number of dollars"));
        }
        if fraction.len() > 9 {
            return Err(invalid("has more than nine decimal places (nano-dollars)"));
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid("is too large"))?
        };
        let mut nanos: u64 = 0;
        for (i, digit) in fraction.bytes().enumerate() {
            let place = 10u64.pow(8 - u32::try_from(i).unwrap_or(8));
            nanos += u64::from(digit - b'0') * place;
        }
        whole
            .checked_mul(NANOS_PER_USD)
            .and_then(|n| n.checked_add(nanos))
            .map(Cost)
            .ok_or_else(|| invalid("is too large"))
    }

    /// The cost of `tokens` tokens at `price` per million tokens, rounded to the nearest
    /// nano-dollar (halves round up). Computed in 128-bit integers, so it cannot overflow for
    /// any realistic price.
    #[must_use]
    pub fn per_million_tokens(price: Cost, tokens: u64) -> Self {
        let exact = u128::from(price.0) * u128::from(tokens);
        let rounded = (exact + 500_000) / 1_000_000;
        Cost(u64::try_from(rounded).unwrap_or(u64::MAX))
    }

    /// Adds two costs, or `None` on overflow.
    #[must_use]
    pub fn checked_add(self, other: Cost) -> Option<Cost> {
        self.0.checked_add(other.0).map(Cost)
    }
}

impl Add for Cost {
    type Output = Cost;

    /// Adds two costs, saturating at the largest representable cost.
    fn add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::ZERO, Add::add)
    }
}

impl fmt::Display for Cost {
    /// Formats as dollars with up to nine decimals and no trailing zeros beyond cents:
    /// `$0.00`, `$1.50`, `$0.003702001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / NANOS_PER_USD;
        let fraction = format!("{:09}", self.0 % NANOS_PER_USD);
        let trimmed = fraction.trim_end_matches('0');
        let shown = if trimmed.len() < 2 {
            &fraction[..2]
        } else {
            trimmed
        };
        write!(f, "${whole}.{shown}")
    }
}

/// Token usage and cost of one model completion.
///
/// A session keeps one `Usage` per completion, so totals can always be recomputed and
/// attributed to the model that incurred them.
///
/// # Examples
///
/// ```
/// use agent_session::{Cost, Usage};
///
/// let usage = Usage::new("gpt-4o-mini")
///     .with_tokens(1_200, 300)
///     .with_cache_tokens(800, 0)
///     .with_cost(Cost::parse_usd("0.00042")?);
/// assert_eq!(usage.input_tokens, 1_200);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Usage {
    /// The model that produced the completion, as the provider named it.
    pub model: String,
    /// Prompt tokens billed at the normal input rate.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// What the completion cost.
    #[serde(rename = "cost_nano_usd")]
    pub cost: Cost,
}

impl Usage {
    /// Usage of a completion by `model`, with every count and the cost zero.
    #[must_use]
    pub fn new(model: impl Into<String>) -> Self {
        Usage {
            model: model.into(),
            ..Usage::default()
        }
    }

    /// Sets the input and output token counts.
    #[must_use]
    pub fn with_tokens(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.input_tokens = input_tokens;
        self.output_tokens = output_tokens;
        self
    }

    /// Sets the cache read and cache write token counts.
    #[must_use]
    pub fn with_cache_tokens(mut self, cache_read_tokens: u64, cache_write_tokens: u64) -> Self {
        self.cache_read_tokens = cache_read_tokens;
        self.cache_write_tokens = cache_write_tokens;
        self
    }

    /// Sets the cost.
    #[must_use]
    pub fn with_cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }
}

/// Usage summed over a session's completions.
///
/// # Examples
///
/// ```
/// use agent_session::{Cost, Usage, UsageTotals};
///
/// let records = [
///     Usage::new("m").with_tokens(10, 5).with_cost(Cost::from_nano_usd(7)),
///     Usage::new("m").with_tokens(20, 1).with_cost(Cost::from_nano_usd(3)),
/// ];
/// let totals = UsageTotals::sum(&records);
/// assert_eq!(totals.completions, 2);
/// assert_eq!(totals.input_tokens, 30);
/// assert_eq!(totals.cost, Cost::from_nano_usd(10));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageTotals {
    /// How many completions were summed.
    pub completions: u64,
    /// Total input tokens.
    pub input_tokens: u64,
    /// Total output tokens.
    pub output_tokens: u64,
    /// Total cache-read tokens.
    pub cache_read_tokens: u64,
    /// Total cache-write tokens.
    pub cache_write_tokens: u64,
    /// Total cost.
    pub cost: Cost,
}

impl UsageTotals {
    /// Sums `records` (saturating; a stored snapshot is checked not to overflow when loaded).
    #[must_use]
    pub fn sum(records: &[Usage]) -> Self {
        records
            .iter()
            .fold(UsageTotals::default(), |t, u| UsageTotals {
                completions: t.completions + 1,
                input_tokens: t.input_tokens.saturating_add(u.input_tokens),
                output_tokens: t.output_tokens.saturating_add(u.output_tokens),
                cache_read_tokens: t.cache_read_tokens.saturating_add(u.cache_read_tokens),
                cache_write_tokens: t.cache_write_tokens.saturating_add(u.cache_write_tokens),
                cost: t.cost + u.cost,
            })
    }

    /// Like [`UsageTotals::sum`], but `None` if any total overflows.
    pub(crate) fn checked_sum(records: &[Usage]) -> Option<Self> {
        records
            .iter()
            .try_fold(UsageTotals::default(), UsageTotals::checked_add)
    }

    /// These totals with `usage` added, or `None` if any total would overflow.
    pub(crate) fn checked_add(self, usage: &Usage) -> Option<Self> {
        Some(UsageTotals {
            completions: self.completions.checked_add(1)?,
            input_tokens: self.input_tokens.checked_add(usage.input_tokens)?,
            output_tokens: self.output_tokens.checked_add(usage.output_tokens)?,
            cache_read_tokens: self
                .cache_read_tokens
                .checked_add(usage.cache_read_tokens)?,
            cache_write_tokens: self
                .cache_write_tokens
                .checked_add(usage.cache_write_tokens)?,
            cost: self.cost.checked_add(usage.cost)?,
        })
    }

    /// These totals with every entry of `usage` added, or `None` on overflow.
    pub(crate) fn checked_extend(self, usage: &[Usage]) -> Option<Self> {
        usage.iter().try_fold(self, UsageTotals::checked_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_usd_is_exact() {
        assert_eq!(Cost::parse_usd("0").unwrap(), Cost::ZERO);
        assert_eq!(Cost::parse_usd("1").unwrap().as_nano_usd(), 1_000_000_000);
        assert_eq!(Cost::parse_usd("0.1").unwrap().as_nano_usd(), 100_000_000);
        assert_eq!(Cost::parse_usd(".000000001").unwrap().as_nano_usd(), 1);
        assert_eq!(
            Cost::parse_usd("12.5").unwrap().as_nano_usd(),
            12_500_000_000
        );
        for bad in [
            "",
            ".",
            "-1",
            "1e3",
            "0.0000000001",
            "abc",
            "1.2.3",
            "99999999999999999999",
        ] {
            assert!(Cost::parse_usd(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn display_round_trips_through_parse() {
        for nanos in [0, 1, 10, 1_000_000_000, 1_500_000_000, 3_702_001, u64::MAX] {
            let cost = Cost::from_nano_usd(nanos);
            let shown = cost.to_string();
            assert_eq!(Cost::parse_usd(&shown[1..]).unwrap(), cost, "{shown}");
        }
        assert_eq!(Cost::ZERO.to_string(), "$0.00");
        assert_eq!(Cost::parse_usd("1.5").unwrap().to_string(), "$1.50");
    }

    #[test]
    fn many_small_additions_do_not_drift() {
        let tenth_of_a_cent = Cost::parse_usd("0.001").unwrap();
        let total: Cost = std::iter::repeat_n(tenth_of_a_cent, 1_000_000).sum();
        assert_eq!(total, Cost::parse_usd("1000").unwrap());
    }

    #[test]
    fn per_million_tokens_rounds_to_nearest() {
        let price = Cost::parse_usd("0.0375").unwrap(); // 37.5 nano-USD per token
        assert_eq!(Cost::per_million_tokens(price, 1).as_nano_usd(), 38);
        assert_eq!(Cost::per_million_tokens(price, 2).as_nano_usd(), 75);
        assert_eq!(Cost::per_million_tokens(Cost::ZERO, u64::MAX), Cost::ZERO);
    }

    #[test]
    fn checked_sum_detects_overflow() {
        let big = Usage::new("m").with_cost(Cost::from_nano_usd(u64::MAX));
        assert!(UsageTotals::checked_sum(&[big.clone(), big]).is_none());
    }
}

//! Command-line values for the library's option types (the `cli` feature): `zkr` and any
//! other `clap` program parse `--loss-policy` and `--layout` into the library's own types, so
//! the accepted words and the library's variants cannot drift apart.

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::{Layout, LossPolicy};

/// `grace`, `suspend`, `expiry` (the words [`LossPolicy`]'s `FromStr` accepts).
impl ValueEnum for LossPolicy {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            LossPolicy::Grace,
            LossPolicy::OnSuspend,
            LossPolicy::OnExpiry,
        ]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            LossPolicy::Grace => PossibleValue::new("grace")
                .help("lost once the connection was down long enough for the session to expire"),
            LossPolicy::OnSuspend => PossibleValue::new("suspend").help("lost on any disconnect"),
            LossPolicy::OnExpiry => {
                PossibleValue::new("expiry").help("lost only on a known session expiry")
            }
        })
    }
}

/// `curator`, `kazoo`.
impl ValueEnum for Layout {
    fn value_variants<'a>() -> &'a [Self] {
        &[Layout::Curator, Layout::Kazoo]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Layout::Curator => PossibleValue::new("curator")
                .help("Apache Curator's node names (`_c_<uuid>-lock-<seq>`), the default"),
            Layout::Kazoo => {
                PossibleValue::new("kazoo").help("kazoo's node names (`<hex>__lock__<seq>`)")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_to_the_library_values() {
        for (word, policy) in [
            ("grace", LossPolicy::Grace),
            ("suspend", LossPolicy::OnSuspend),
            ("expiry", LossPolicy::OnExpiry),
        ] {
            assert_eq!(LossPolicy::from_str(word, false).unwrap(), policy);
            assert_eq!(word.parse::<LossPolicy>().unwrap(), policy);
        }
        assert_eq!(Layout::from_str("kazoo", false).unwrap(), Layout::Kazoo);
        assert!(Layout::from_str("zookeeper", false).is_err());
    }
}

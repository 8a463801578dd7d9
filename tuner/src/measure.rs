//! Measuring points: the protocol between a search and whatever times a configuration.

use crate::Config;
use serde::{Deserialize, Serialize};

/// The outcome of measuring one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// It ran and was correct. `samples` are the repeated run times in seconds.
    Valid { samples: Vec<f64> },
    /// It failed to build, crashed, hung or computed a wrong result; the search goes on
    /// with fitness 0 for this point.
    Invalid { reason: String },
}

impl Outcome {
    /// The median run time, for a valid outcome with samples.
    pub fn seconds(&self) -> Option<f64> {
        match self {
            Outcome::Valid { samples } if !samples.is_empty() => {
                let mut s = samples.clone();
                s.sort_by(f64::total_cmp);
                Some(s[s.len() / 2])
            }
            _ => None,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.seconds().is_some()
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub config: Config,
    pub outcome: Outcome,
    /// The side-by-side round it was measured in ([`crate::confirm`]): both points of a
    /// round share it, and [`crate::judge`] compares them by their ratio in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<u64>,
}

/// Times configurations. Implementations build candidates (possibly in parallel) and run
/// them one at a time; a bad candidate is an [`Outcome::Invalid`], never an error of the
/// measurer itself.
pub trait Measurer {
    /// Measures a batch; returns one outcome per config, in order.
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome>;

    /// Measures one config again (for strategies that need more samples to decide,
    /// such as Droplet's statistical test). Defaults to [`Measurer::measure`].
    fn remeasure(&mut self, config: &Config) -> Outcome {
        self.measure(std::slice::from_ref(config))
            .pop()
            .unwrap_or(Outcome::Invalid {
                reason: "measurer returned nothing".into(),
            })
    }

    /// Measures two configs again side by side, their calls alternating, so that whatever
    /// else the machine does meanwhile hits both alike ([`crate::confirm`] compares the
    /// winner with the default so). Defaults to [`Measurer::remeasure`] of each in turn.
    fn remeasure_pair(&mut self, a: &Config, b: &Config) -> [Outcome; 2] {
        [self.remeasure(a), self.remeasure(b)]
    }

    /// Measures from here on with the data in other memory, where the measurer can (a CPU
    /// measurer's buffers on fresh pages): what makes a comparison hold for more than one
    /// placement ([`crate::confirm`] varies it each round). Defaults to nothing.
    fn vary(&mut self) {}
}

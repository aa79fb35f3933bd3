//! [`MqQdisc`] for [`Cake`]: what lets a [`super::MultiQueue`] build one CAKE per TX queue
//! from one shared [`CakeConfig`] and reconfigure them all in place (as Linux's cake_mq:
//! each child is built from the full rate; the rate sync scales it down with `set_rate`
//! only).

use super::MqQdisc;
use crate::cake::{Cake, CakeConfig, ConfigError};
use crate::{Packet, Rate};

impl<P: Packet + Send> MqQdisc<P> for Cake<P> {
    type Config = CakeConfig;
    type Error = ConfigError;

    fn build(config: &CakeConfig) -> Result<Cake<P>, ConfigError> {
        Cake::new(config)
    }

    fn validate(config: &CakeConfig) -> Result<(), ConfigError> {
        config.validate()
    }

    fn reconfigure(&mut self, config: &CakeConfig) -> Result<(), ConfigError> {
        Cake::reconfigure(self, config)
    }

    fn config_rate(config: &CakeConfig) -> Rate {
        config.rate
    }

    fn is_rate_only_change(old: &CakeConfig, new: &CakeConfig) -> bool {
        // Memory limit and COBALT parameters derive from the full rate in Linux too, but a
        // rate step must never purge or rebuild (docs/design.md, "cake_mq"); they follow at
        // the next full reconfigure.
        let same_rate = CakeConfig {
            rate: old.rate,
            ..new.clone()
        };
        same_rate == *old
    }
}

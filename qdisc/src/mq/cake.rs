//! [`MqQdisc`] for [`Cake`]: what lets a [`super::MultiQueue`] build one CAKE per TX queue
//! from one shared [`CakeConfig`] and reconfigure them all in place (cake-spec.md §7: each
//! child is built from the full rate; the rate sync scales it down with `set_rate` only).

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
}

//! [`MqQdisc`] for [`Fifo`]: what lets a [`super::MultiQueue`] build one pfifo_fast-style
//! baseline per TX queue from one [`FifoConfig`] and change its limit in place. The FIFO never
//! shapes, so its configured rate is always unlimited.

use super::MqQdisc;
use crate::fifo::{Fifo, FifoConfig};
use crate::{Packet, Rate};

impl<P: Packet + Send> MqQdisc<P> for Fifo<P> {
    type Config = FifoConfig;
    type Error = std::convert::Infallible;

    fn build(config: &FifoConfig) -> Result<Fifo<P>, Self::Error> {
        Ok(Fifo::new(config.limit_packets))
    }

    fn validate(_config: &FifoConfig) -> Result<(), Self::Error> {
        Ok(())
    }

    fn reconfigure(&mut self, config: &FifoConfig) -> Result<(), Self::Error> {
        self.set_limit(config.limit_packets);
        Ok(())
    }

    fn config_rate(_config: &FifoConfig) -> Rate {
        Rate::UNLIMITED
    }

    fn is_rate_only_change(old: &FifoConfig, new: &FifoConfig) -> bool {
        old == new
    }
}

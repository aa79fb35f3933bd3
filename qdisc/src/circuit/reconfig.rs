//! Applying a new [`CircuitShaperConfig`] in place, slot by slot, and the
//! [`MqQdisc`] implementation that lets a [`crate::mq::MultiQueue`] build and reconfigure
//! one shaper per TX queue.
//!
//! A plan whose instance configuration differs in the rate alone goes through the
//! instance's `set_rate` (a pure parameter write: no purge, no cursor move, no table
//! walk); any other difference through `Cake::reconfigure`, which keeps every packet. A
//! slot that loses its plan keeps its instance until it has drained; a slot that gains one
//! starts on its first packet. Nothing queued is ever dropped by a reconfigure.
//!
//! Under a node tree a circuit's instance runs at its share, not its plan's rate: a
//! changed plan keeps the share in force (the tree's sync applies the new one, through
//! the same `set_rate`), so that the instance never runs at its plan's max, above its
//! share, between the reconfigure and that sync. When the new config carries the same
//! tree, changed in place ([`super::TreeRef::max_changes`]), the shaper keeps its link to
//! it, meters and all.

use std::sync::Arc;

use super::{CircuitConfigError, CircuitShaper, CircuitShaperConfig, Sched, DEFAULT_ID};
use crate::cake::CakeConfig;
use crate::mq::MqQdisc;
use crate::{Packet, Qdisc, Rate};

/// Returns true when `new` differs from `old` in the rate at most.
pub(super) fn rate_only(old: &CakeConfig, new: &CakeConfig) -> bool {
    *old == CakeConfig {
        rate: old.rate,
        ..new.clone()
    }
}

impl<P: Packet> CircuitShaper<P> {
    /// Applies `config` in place (see the module docs). The link cap is set to the
    /// configured rate; the cake_mq sync scales it after.
    ///
    /// # Errors
    /// Whatever [`CircuitShaperConfig::validate`] rejects; nothing changes then.
    pub fn reconfigure(&mut self, config: &CircuitShaperConfig) -> Result<(), CircuitConfigError> {
        config.validate()?;
        self.apply_validated(config);
        Ok(())
    }

    /// [`Self::reconfigure`] for a config that has passed [`CircuitShaperConfig::validate`]:
    /// the runner applies what [`crate::mq::TxQueue::request_reconfigure`] validated on the
    /// caller's thread, and validating every plan again on the worker (0.3 ms at 100 000
    /// circuits) would stall its queue for nothing.
    fn apply_validated(&mut self, config: &CircuitShaperConfig) {
        let now = self.last_now;
        let old = std::mem::replace(&mut self.config, config.clone());
        self.gate.configure(&config.link, now);
        let slots = old.plans.len().max(config.plans.len());
        self.grow(slots + 1);

        let new_default = config.default_instance_config();
        let old_default = std::mem::replace(&mut self.default_cfg, new_default.clone());
        self.retune(DEFAULT_ID, &old_default, &new_default, now);

        // The tree first: a plan change below keeps the share the (new) tree holds.
        self.tree = super::tree::TreeLink::for_config(config, self.tree.take());
        // What `instance_config` takes from the shaper's config besides the plan: when any
        // of it changed, every live instance is retuned, its plan changed or not.
        let same_limits = old.circuit_memory_limit == config.circuit_memory_limit
            && old.circuit_packet_limit == config.circuit_packet_limit
            && old.circuit_burst == config.circuit_burst;
        if !(same_limits && Arc::ptr_eq(&old.plans, &config.plans)) {
            for slot in 0..slots as u32 {
                let id = slot + 1;
                let (was, now_planned) = (old.plan(slot), config.plan(slot));
                if was.is_some() != now_planned.is_some() {
                    // Only where it changed: a write to every slot record is a walk over
                    // all of them (6 MiB at 100 000 circuits) on the worker.
                    self.slots[id as usize].planned = now_planned.is_some();
                }
                match (was, now_planned) {
                    (None, None) => {}
                    (Some(_), None) => {
                        // Removed: drains, then is released (at once if already empty).
                        let s = &self.slots[id as usize];
                        if s.cake.is_some() && s.sched == Sched::Idle {
                            self.release(id);
                        }
                    }
                    (None, Some(plan)) => {
                        // A new circuit in this slot: the previous one's counters move to
                        // the retired totals so that they are neither lost nor inherited.
                        let s = &mut self.slots[id as usize];
                        let previous = std::mem::take(&mut s.counters);
                        self.retired.add(&previous);
                        if let Some(cake) = s.cake.as_deref() {
                            // The previous circuit still drains here: its packets stay
                            // and go out under the new plan.
                            let want = config.instance_config(plan);
                            let have = cake.config().clone();
                            match self.tree_wake_rate(id) {
                                Some(_) => self.retune_keeping_rate(id, &want, now),
                                None => self.retune(id, &have, &want, now),
                            }
                        }
                    }
                    (Some(a), Some(b)) => {
                        if a != b || !same_limits {
                            let (o, n) = (old.instance_config(a), config.instance_config(b));
                            match self.tree_wake_rate(id) {
                                // Under the tree: the options change, the rate in force
                                // stays until the sync applies the tree's share.
                                Some(_) => self.retune_keeping_rate(id, &n, now),
                                None => self.retune(id, &o, &n, now),
                            }
                        }
                    }
                }
            }
        }
        self.spare.truncate(config.spare_instances);
    }

    /// [`Self::retune`] to `new` under a node tree: what differs but the rate through
    /// `Cake::reconfigure`, with the rate in force now (the tree's share) kept; nothing at
    /// all when only the rate differs.
    fn retune_keeping_rate(&mut self, id: u32, new: &CakeConfig, now: u64) {
        let Some(cake) = self.slots[id as usize].cake.as_deref() else {
            return;
        };
        let have = cake.config().clone();
        let want = CakeConfig {
            rate: have.rate,
            ..new.clone()
        };
        if want != have {
            let rate = cake.current_rate();
            self.retune_to(id, &have, &want, Some(rate), now);
        }
    }

    /// Moves `id`'s instance, if any, from `old` to `new`: `set_rate` for a rate-only
    /// difference, a full reconfigure otherwise; then places it again in the scheduler
    /// when its shaper's next send time moved.
    pub(super) fn retune(&mut self, id: u32, old: &CakeConfig, new: &CakeConfig, now: u64) {
        self.retune_to(id, old, new, None, now);
    }

    /// [`Self::retune`], and then `set_rate(rate)` when a rate is given (after a full
    /// reconfigure, which applies `new`'s), even when `old` and `new` are the same.
    pub(super) fn retune_to(
        &mut self,
        id: u32,
        old: &CakeConfig,
        new: &CakeConfig,
        rate: Option<Rate>,
        now: u64,
    ) {
        let Some(cake) = self.slots[id as usize].cake.as_deref_mut() else {
            return;
        };
        if old == new && rate.is_none() {
            return;
        }
        if old != new {
            if rate_only(old, new) {
                cake.set_rate(new.rate);
            } else {
                // Validated with the config; on a refusal the instance keeps working as it
                // was.
                let _ = cake.reconfigure(new);
            }
        }
        if let Some(rate) = rate.filter(|r| *r != cake.current_rate()) {
            cake.set_rate(rate);
        }
        let wake = cake.next_wakeup();
        self.reschedule(id, wake, now);
    }

    /// Places `id` again in the scheduler after its shaper's next send time moved to
    /// `wake`: a held circuit waits for the new time, or is ready now.
    pub(super) fn reschedule(&mut self, id: u32, wake: Option<u64>, now: u64) {
        let quantum = self.gate.quantum();
        let s = &mut self.slots[id as usize];
        if s.sched == Sched::Held {
            match wake {
                Some(t) if t > now => self.heap.set(id, t),
                _ => {
                    self.heap.remove(id);
                    self.ring.push_back(id);
                    s.sched = Sched::Released;
                    s.deficit = quantum;
                }
            }
        }
    }
}

impl<P: Packet + Send> MqQdisc<P> for CircuitShaper<P> {
    type Config = CircuitShaperConfig;
    type Error = CircuitConfigError;

    fn build(config: &CircuitShaperConfig) -> Result<CircuitShaper<P>, CircuitConfigError> {
        CircuitShaper::new(config)
    }

    fn validate(config: &CircuitShaperConfig) -> Result<(), CircuitConfigError> {
        config.validate()
    }

    fn reconfigure(&mut self, config: &CircuitShaperConfig) -> Result<(), CircuitConfigError> {
        self.apply_validated(config);
        Ok(())
    }

    fn config_rate(config: &CircuitShaperConfig) -> Rate {
        config.link.rate
    }

    /// True when only the link rate differs; any plan change is a full reconfigure (which
    /// still applies a plan's rate-only change through that instance's `set_rate`).
    fn is_rate_only_change(old: &CircuitShaperConfig, new: &CircuitShaperConfig) -> bool {
        rate_only(&old.link, &new.link)
            && CircuitShaperConfig {
                link: old.link.clone(),
                ..new.clone()
            } == *old
    }
}

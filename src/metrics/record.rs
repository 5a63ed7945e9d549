//! The episode record ConfigMap (`record`): writes, size and what was shed.

use super::labels::{RecordLabels, ShedLabels};
use super::values::{self, RecordResult, RecordWriter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The episode record's families.
pub struct RecordMetrics {
    pub writes: Family<RecordLabels, Counter>,
    pub bytes: Gauge,
    pub shed: Family<ShedLabels, Counter>,
}

impl RecordMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            writes: Family::default(),
            bytes: Gauge::default(),
            shed: Family::default(),
        };
        r.register(
            "remedy_episode_record_writes",
            "Writes of the episode record ConfigMap by writer (webhook: any replica appending notifications; leader: episodes) and result",
            m.writes.clone(),
        );
        r.register_with_unit(
            "remedy_episode_record",
            "Encoded size of the episode record last read or written",
            Unit::Bytes,
            m.bytes.clone(),
        );
        r.register(
            "remedy_episode_record_shed",
            "Entries dropped to keep the episode record writable: finished or unproven episodes over its size bound, or a corrupt record rewritten",
            m.shed.clone(),
        );
        m
    }

    /// Every writer with every result, and every shed reason, at 0.
    pub(super) fn preset(&self) {
        for &reason in values::RECORD_SHED {
            self.shed.get_or_create(&ShedLabels { reason }).inc_by(0);
        }
        for &writer in RecordWriter::ALL {
            for &result in RecordResult::ALL {
                self.writes
                    .get_or_create(&RecordLabels { writer, result })
                    .inc_by(0);
            }
        }
    }
}

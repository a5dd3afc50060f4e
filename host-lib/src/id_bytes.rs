//! Message ids that came from outside idem as bytes (a log file's ids, a Kafka record's
//! key or its place), by offset from 0, in one buffer: a million of them take their
//! bytes and a word each. `idem device` names a stream by them and keys each one under
//! the board's own id key.

/// The bytes each event's message id is made of, by offset from 0.
#[derive(Debug, Default)]
pub struct IdBytes {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl IdBytes {
    /// Adds the next offset's bytes.
    pub fn push(&mut self, id: &[u8]) {
        self.bytes.extend_from_slice(id);
        self.ends.push(self.bytes.len());
    }

    /// How many offsets it holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no offset.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of offset `i`'s id.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j]);
        Some(&self.bytes[start..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each offset gives back its own bytes, an empty id included; past the end, none.
    #[test]
    fn each_offset_reads_back_its_own_bytes() {
        let mut ids = IdBytes::default();
        assert!(ids.is_empty());
        for id in [&b"p17"[..], b"", b"0123456789"] {
            ids.push(id);
        }
        assert_eq!(ids.len(), 3);
        assert_eq!(ids.get(0), Some(&b"p17"[..]));
        assert_eq!(ids.get(1), Some(&b""[..]));
        assert_eq!(ids.get(2), Some(&b"0123456789"[..]));
        assert_eq!(ids.get(3), None);
    }
}

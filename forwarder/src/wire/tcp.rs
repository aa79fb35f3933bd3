//! TCP segments (RFC 9293): a checked view of the header and the option walk that fills
//! [`TcpAckInfo`] for CAKE's ACK filter. Only what the filter reads is decoded: flags, the
//! acknowledgement number, payload length, timestamps and SACK blocks.

use qdisc::TcpAckInfo;

use super::Malformed;

/// Header length without options.
pub const MIN_HEADER_LEN: usize = 20;

mod field {
    use core::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const SEQ: Range<usize> = 4..8;
    pub(super) const ACK: Range<usize> = 8..12;
    pub(super) const DATA_OFFSET: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const OPTIONS: usize = 20;
}

/// TCP option kinds the ACK filter distinguishes.
mod option {
    pub(super) const EOL: u8 = 0;
    pub(super) const NOP: u8 = 1;
    pub(super) const SACK: u8 = 5;
    pub(super) const TIMESTAMP: u8 = 8;
    pub(super) const MD5: u8 = 19;
}

/// A view of a TCP header. After [`TcpSegment::new_checked`] the data offset is in range and
/// the whole header, options included, is inside the buffer.
#[derive(Debug, Clone, Copy)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Returns a view after checking the header and options fit.
    ///
    /// # Errors
    /// [`Malformed::TruncatedL4`] when the header is cut off and
    /// [`Malformed::BadTcpDataOffset`] when the data offset is below 5 words or past the end.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Malformed::TruncatedL4);
        }
        let segment = TcpSegment { buffer };
        let header_len = segment.header_len();
        if header_len < MIN_HEADER_LEN || header_len > segment.buffer.as_ref().len() {
            return Err(Malformed::BadTcpDataOffset);
        }
        Ok(segment)
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::SRC_PORT];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::DST_PORT];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::SEQ];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Acknowledgement number.
    pub fn ack_seq(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::ACK];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// The flags byte (FIN 0x01 … CWR 0x80).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// Returns the ACK filter's view of this segment, given the segment's length from the IP
    /// header (header plus payload).
    pub fn ack_info(&self, segment_len: usize) -> TcpAckInfo {
        let mut info = TcpAckInfo {
            flags: self.flags(),
            ack_seq: self.ack_seq(),
            payload_len: segment_len
                .saturating_sub(self.header_len())
                .min(usize::from(u16::MAX)) as u16,
            ..TcpAckInfo::default()
        };
        parse_options(self.options(), &mut info);
        info
    }
}

fn read_u32(b: &[u8]) -> u32 {
    match b {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

/// Decodes the option list into `info`; anything the ACK filter does not understand, and any
/// malformed option, sets `other_options` (such a segment is never filtered).
fn parse_options(mut opts: &[u8], info: &mut TcpAckInfo) {
    while let Some(&kind) = opts.first() {
        match kind {
            option::EOL => return,
            option::NOP => {
                opts = &opts[1..];
                continue;
            }
            _ => {}
        }
        let len = match opts.get(1) {
            Some(&len) if len >= 2 && usize::from(len) <= opts.len() => usize::from(len),
            _ => {
                info.other_options = true;
                return;
            }
        };
        let body = &opts[2..len];
        match kind {
            option::TIMESTAMP if len == 10 => {
                info.timestamp = Some((read_u32(body), read_u32(&body[4..])));
            }
            // sch_cake accepts SACK only when the length is 2 mod 8 (whole blocks).
            option::SACK if len % 8 == 2 && len > 2 => {
                for block in body.chunks_exact(8) {
                    let i = usize::from(info.sack_count);
                    if i < info.sack.len() {
                        info.sack[i] = (read_u32(block), read_u32(&block[4..]));
                        info.sack_count += 1;
                    }
                }
            }
            option::MD5 if len == 18 => {}
            _ => info.other_options = true,
        }
        opts = &opts[len..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A pure ACK, 80 -> 40000, ack 0x01020304, data offset 8 (12 option bytes):
    // NOP NOP TS(val 0x11111111, ecr 0x22222222).
    static ACK_WITH_TIMESTAMPS: [u8; 32] = [
        0x00, 0x50, 0x9c, 0x40, 0, 0, 0, 1, 0x01, 0x02, 0x03, 0x04, 0x80, 0x10, 0xff, 0xff, 0, 0,
        0, 0, //
        1, 1, 8, 10, 0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22,
    ];

    #[test]
    fn pure_ack_with_timestamps_decodes() {
        let tcp = TcpSegment::new_checked(&ACK_WITH_TIMESTAMPS[..]).unwrap();
        assert_eq!((tcp.src_port(), tcp.dst_port()), (80, 40000));
        assert_eq!(tcp.header_len(), 32);
        let info = tcp.ack_info(32);
        assert_eq!(info.flags, 0x10);
        assert_eq!(info.ack_seq, 0x0102_0304);
        assert_eq!(info.payload_len, 0);
        assert_eq!(info.timestamp, Some((0x1111_1111, 0x2222_2222)));
        assert!(!info.other_options);
    }

    #[test]
    fn sack_blocks_are_collected() {
        let mut info = TcpAckInfo::default();
        let opts = [
            1, 1, 5, 18, 0, 0, 0, 10, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0, 40,
        ];
        parse_options(&opts, &mut info);
        assert_eq!(info.sack_count, 2);
        assert_eq!(&info.sack[..2], &[(10, 20), (30, 40)]);
        assert!(!info.other_options);
    }

    #[test]
    fn unknown_or_broken_options_mark_other_options() {
        let mut info = TcpAckInfo::default();
        parse_options(&[2, 4, 0x05, 0xb4], &mut info); // MSS
        assert!(info.other_options);
        let mut info = TcpAckInfo::default();
        parse_options(&[8, 40, 0], &mut info); // length past the end
        assert!(info.other_options);
        let mut info = TcpAckInfo::default();
        parse_options(&[5, 7, 0, 0, 0, 0, 0], &mut info); // SACK not 2 mod 8
        assert!(info.other_options);
        let mut info = TcpAckInfo::default();
        parse_options(&[0, 2, 4], &mut info); // EOL ends the list
        assert!(!info.other_options);
    }

    #[test]
    fn md5_option_is_allowed() {
        let mut info = TcpAckInfo::default();
        let mut opts = vec![19, 18];
        opts.extend_from_slice(&[0xaa; 16]);
        parse_options(&opts, &mut info);
        assert!(!info.other_options);
    }

    #[test]
    fn bad_data_offset_is_malformed() {
        let mut seg = ACK_WITH_TIMESTAMPS;
        seg[12] = 0x40;
        assert_eq!(
            TcpSegment::new_checked(&seg[..]).err(),
            Some(Malformed::BadTcpDataOffset)
        );
        seg[12] = 0xf0;
        assert_eq!(
            TcpSegment::new_checked(&seg[..]).err(),
            Some(Malformed::BadTcpDataOffset)
        );
        assert_eq!(
            TcpSegment::new_checked(&seg[..19]).err(),
            Some(Malformed::TruncatedL4)
        );
    }
}

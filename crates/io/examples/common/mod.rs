//! What the veth rate examples share.

/// A 60-byte frame the receiving stack ignores: locally administered
/// destination and source MACs, EtherType 0x88b5 (local experimental).
pub const FRAME: [u8; 60] = {
    let mut frame = [0u8; 60];
    frame[0] = 0x02;
    frame[5] = 0x02;
    frame[6] = 0x02;
    frame[11] = 0x01;
    frame[12] = 0x88;
    frame[13] = 0xb5;
    frame
};

//! UDP batches on loopback (no privilege needed).
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pspat_io::udp::{RecvMeta, Timestamps, UdpBatchSocket, MAX_BATCH};

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

fn pair(timestamps: Timestamps) -> (UdpBatchSocket, UdpBatchSocket) {
    let sender = UdpBatchSocket::bind("127.0.0.1:0", Timestamps::None).unwrap();
    let receiver = UdpBatchSocket::bind("127.0.0.1:0", timestamps).unwrap();
    sender.connect(receiver.local_addr().unwrap()).unwrap();
    receiver.connect(sender.local_addr().unwrap()).unwrap();
    (sender, receiver)
}

fn datagram(seq: u32) -> Vec<u8> {
    let mut bytes = seq.to_be_bytes().to_vec();
    bytes.resize(32 + (seq % 7) as usize, seq as u8);
    bytes
}

fn round_trip(timestamps: Timestamps) {
    let (sender, receiver) = pair(timestamps);
    let total = 3 * MAX_BATCH as u32;
    let datagrams: Vec<Vec<u8>> = (0..total).map(datagram).collect();
    let before = now();
    for batch in datagrams.chunks(MAX_BATCH) {
        let views: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        assert_eq!(sender.send_batch(&views).unwrap(), views.len());
    }
    let mut storage = vec![[0u8; 256]; MAX_BATCH];
    let mut meta = [RecvMeta::default(); MAX_BATCH];
    let mut next = 0u32;
    for _ in 0..100 {
        if next == total {
            break;
        }
        let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let n = receiver
            .recv_batch(&mut buffers, &mut meta, Duration::from_millis(200))
            .unwrap();
        for (buffer, info) in buffers.iter().zip(&meta).take(n) {
            assert_eq!(
                &buffer[..info.len],
                datagram(next).as_slice(),
                "datagram {next}"
            );
            assert!(!info.truncated);
            assert_eq!(info.source, Some(sender.local_addr().unwrap()));
            match timestamps {
                Timestamps::None => assert_eq!(info.timestamp, None),
                _ => {
                    let stamp = info.timestamp.expect("a timestamp");
                    assert!(stamp >= before && stamp <= now(), "{stamp:?}");
                }
            }
            next += 1;
        }
    }
    assert_eq!(next, total, "every datagram, in order");
}

#[test]
fn batches_round_trip_with_kernel_timestamps() {
    round_trip(Timestamps::Kernel);
}

#[test]
fn batches_round_trip_with_user_timestamps() {
    round_trip(Timestamps::User);
}

#[test]
fn batches_round_trip_without_timestamps() {
    round_trip(Timestamps::None);
}

#[test]
fn a_short_buffer_is_reported_truncated_and_an_empty_wait_times_out() {
    let (sender, receiver) = pair(Timestamps::None);
    let mut small = [0u8; 8];
    let mut buffers: Vec<&mut [u8]> = vec![&mut small];
    let mut meta = [RecvMeta::default(); 1];
    let start = std::time::Instant::now();
    assert_eq!(
        receiver
            .recv_batch(&mut buffers, &mut meta, Duration::from_millis(30))
            .unwrap(),
        0
    );
    assert!(start.elapsed() >= Duration::from_millis(25));
    assert_eq!(sender.send_batch(&[&[7u8; 100]]).unwrap(), 1);
    let n = receiver
        .recv_batch(&mut buffers, &mut meta, Duration::from_secs(1))
        .unwrap();
    assert_eq!(n, 1);
    assert!(meta[0].truncated);
    assert_eq!(meta[0].len, 8);
    assert_eq!(small, [7u8; 8]);
}

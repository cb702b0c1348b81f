//! QEMU's `virtio-net-pci` on a datagram socket the lab holds. QEMU's `-netdev dgram` connects
//! the NIC to a unix datagram socket in the VM's scratch dir (so parallel runs share no port or
//! socket): every Ethernet frame the lab writes to QEMU's end reaches the guest's NIC, and every
//! frame the guest sends arrives at the lab's end. [`Traffic`], the NIC's host side, sends UDP
//! datagrams to the guest at a set rate, so a scenario can wake a receiver in the guest through
//! the NIC's interrupt, the classic IRQ-heavy workload.
//!
//! Addresses are fixed per device index: the guest's NIC is `52:54:00:6c:61:<index>` and
//! `10.77.<index>.2/24`, the lab's end `02:6c:61:62:00:<index>` and `10.77.<index>.1`.
//! [`guest_setup`] brings the guest's interface up with its address.
//!
//! Frames are built by hand (Ethernet II, IPv4 without options, UDP with no checksum, which IPv4
//! allows): a packet crate would bring a parser and a socket layer for 42 bytes of headers.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::net::UnixDatagram;

use super::{Attached, Attachment, Device, GuestDriver, HostPart};

/// QEMU's virtio-net NIC (one queue pair: config, receive and transmit vectors), its traffic
/// coming from the lab ([`Traffic`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Nic;

/// The addresses of the NIC at device `index` and of the lab's end of its wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Addresses {
    pub guest_mac: [u8; 6],
    pub guest_ip: Ipv4Addr,
    pub host_mac: [u8; 6],
    pub host_ip: Ipv4Addr,
}

impl Addresses {
    pub(crate) fn for_index(index: usize) -> Addresses {
        let n = (index & 0xff) as u8;
        Addresses {
            guest_mac: [0x52, 0x54, 0x00, 0x6c, 0x61, n],
            guest_ip: Ipv4Addr::new(10, 77, n, 2),
            host_mac: [0x02, 0x6c, 0x61, 0x62, 0x00, n],
            host_ip: Ipv4Addr::new(10, 77, n, 1),
        }
    }
}

fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[async_trait::async_trait]
impl Device for Nic {
    fn label(&self) -> String {
        "nic".to_string()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!("nic")
    }

    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
        let ours = at.scratch.join(format!("{}-lab.sock", at.id));
        let qemus = at.scratch.join(format!("{}-qemu.sock", at.id));
        let traffic = Traffic::bind(&ours, &qemus, Addresses::for_index(at.index))?;
        let addresses = traffic.addresses;
        let netdev = format!("{}-net", at.id);
        Ok(Attached {
            qemu_args: vec![
                "-netdev".into(),
                format!(
                    "dgram,id={netdev},local.type=unix,local.path={},remote.type=unix,remote.path={}",
                    crate::qemu_opt_path(&qemus),
                    crate::qemu_opt_path(&ours)
                ),
                "-device".into(),
                format!(
                    "virtio-net-pci,netdev={netdev},id={},addr={},mac={}",
                    at.id,
                    at.slot,
                    mac_text(&addresses.guest_mac)
                ),
            ],
            host_part: Some(Box::new(traffic)),
            ..Attached::default()
        })
    }

    /// virtio-net binds to the virtio device the PCI transport creates; the interface exists
    /// once the driver has set up its queues.
    fn guest_driver(&self) -> GuestDriver {
        GuestDriver::new("virtio-pci", None, "exists $dev/virtio*/net/*")
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A shell script that brings up the NIC at `pci_address` (device `index`) with its address and
/// prints the interface's name.
pub fn guest_setup(pci_address: &str, index: usize) -> String {
    let a = Addresses::for_index(index);
    format!(
        "set -e\nifc=$(ls /sys/bus/pci/devices/{pci_address}/virtio*/net/)\n\
         ip link set \"$ifc\" up\nip addr add {}/24 dev \"$ifc\"\necho \"$ifc\"\n",
        a.guest_ip
    )
}

/// UDP datagrams to send to the guest: `count` of `payload` bytes each to `port`, `rate` per
/// second (spread evenly; a late tick sends at once, so the average holds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UdpFlow {
    /// The guest's UDP port.
    pub port: u16,
    /// Bytes of payload per datagram (at most 1472).
    pub payload: usize,
    /// Datagrams per second.
    pub rate: f64,
    /// How many datagrams.
    pub count: u64,
}

/// What a flow did: datagrams handed to QEMU, ones QEMU's socket had no room for, and how long
/// it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sent {
    /// Datagrams handed to QEMU.
    pub frames: u64,
    /// Datagrams QEMU's socket had no room for.
    pub dropped: u64,
    /// From the first datagram to the last.
    pub elapsed: Duration,
}

impl Sent {
    /// Datagrams handed to QEMU per second.
    pub fn rate(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The largest UDP payload in one Ethernet frame without fragments (1500 - 20 - 8).
pub(crate) const MAX_PAYLOAD: usize = 1472;

/// The lab's end of a NIC's wire: sends frames into the guest and counts what the guest sends.
pub struct Traffic {
    socket: Arc<UnixDatagram>,
    qemu_end: PathBuf,
    pub(crate) addresses: Addresses,
    from_guest: Arc<AtomicU64>,
    reader: tokio::task::JoinHandle<()>,
}

impl Traffic {
    /// Binds the lab's end at `ours`; QEMU binds `qemus` when it starts.
    fn bind(ours: &Path, qemus: &Path, addresses: Addresses) -> Result<Traffic> {
        let socket = Arc::new(
            UnixDatagram::bind(ours).with_context(|| format!("binding {}", ours.display()))?,
        );
        let from_guest = Arc::new(AtomicU64::new(0));
        let reader = tokio::spawn({
            let (socket, count) = (socket.clone(), from_guest.clone());
            async move {
                let mut frame = vec![0u8; 65536];
                while socket.recv(&mut frame).await.is_ok() {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Traffic {
            socket,
            qemu_end: qemus.to_path_buf(),
            addresses,
            from_guest,
            reader,
        })
    }

    /// Frames the guest has sent so far (ARP, ICMP errors for closed ports, replies).
    pub fn frames_from_guest(&self) -> u64 {
        self.from_guest.load(Ordering::Relaxed)
    }

    /// Sends `flow` to the guest, paced at its rate.
    pub async fn send_udp(&self, flow: &UdpFlow) -> Result<Sent> {
        if flow.payload > MAX_PAYLOAD {
            bail!(
                "UDP payload of {} bytes: at most {MAX_PAYLOAD} fit one frame",
                flow.payload
            );
        }
        if !(flow.rate.is_finite() && flow.rate > 0.0) {
            bail!("UDP rate {}: give datagrams per second above 0", flow.rate);
        }
        // Connected, the socket can wait for room in QEMU's queue (a unix datagram queue holds
        // `net.unix.max_dgram_qlen` frames, 10 by default).
        self.socket.connect(&self.qemu_end).with_context(|| {
            format!(
                "connecting to the guest's NIC at {} (is QEMU running?)",
                self.qemu_end.display()
            )
        })?;
        let period = Duration::from_secs_f64(1.0 / flow.rate);
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let started = Instant::now();
        let mut sent = Sent {
            frames: 0,
            dropped: 0,
            elapsed: Duration::ZERO,
        };
        for n in 0..flow.count {
            ticks.tick().await;
            let frame = udp_frame(&self.addresses, flow.port, flow.payload, n);
            // QEMU's queue full for a whole period (the guest not taking frames): the wire
            // drops the frame, as a real one would, and the flow keeps its pace.
            match tokio::time::timeout(period, self.socket.send(&frame)).await {
                Ok(Ok(_)) => sent.frames += 1,
                Err(_) => sent.dropped += 1,
                Ok(Err(e)) => {
                    return Err(e).with_context(|| {
                        format!(
                            "sending to the guest's NIC through {} (is QEMU running?)",
                            self.qemu_end.display()
                        )
                    })
                }
            }
        }
        sent.elapsed = started.elapsed();
        Ok(sent)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl HostPart for Traffic {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// One Ethernet II frame with an IPv4/UDP datagram from the lab's end to the guest's `port`;
/// the payload starts with the datagram's sequence number (big-endian), zeros after it.
pub(crate) fn udp_frame(a: &Addresses, port: u16, payload: usize, sequence: u64) -> Vec<u8> {
    let udp_len = 8 + payload;
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&a.guest_mac);
    f.extend_from_slice(&a.host_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = f.len();
    f.extend_from_slice(&[0x45, 0]); // version 4, 5 words; DSCP 0
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&(sequence as u16).to_be_bytes()); // identification
    f.extend_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    f.extend_from_slice(&[64, 17]); // TTL, UDP
    f.extend_from_slice(&[0, 0]); // checksum, below
    f.extend_from_slice(&a.host_ip.octets());
    f.extend_from_slice(&a.guest_ip.octets());
    let checksum = ipv4_checksum(&f[ip_start..ip_start + 20]);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&checksum.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes()); // source port: the same
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no checksum
    let mut body = vec![0u8; payload];
    let seq = sequence.to_be_bytes();
    let n = seq.len().min(payload);
    body[..n].copy_from_slice(&seq[..n]);
    f.extend_from_slice(&body);
    f
}

/// The IPv4 header checksum (RFC 791): the ones' complement of the ones' complement sum of
/// the header's 16-bit words, the checksum field taken as 0.
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_valid_ipv4_and_udp_headers() {
        let a = Addresses::for_index(3);
        let f = udp_frame(&a, 9000, 32, 0x0102);
        assert_eq!(f.len(), 14 + 20 + 8 + 32);
        assert_eq!(&f[0..6], &[0x52, 0x54, 0x00, 0x6c, 0x61, 3]);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        // A header with its checksum filled in sums to 0xffff: its checksum over it is 0.
        assert_eq!(ipv4_checksum(ip), 0);
        assert_eq!(&ip[12..16], &[10, 77, 3, 1]);
        assert_eq!(&ip[16..20], &[10, 77, 3, 2]);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 60);
        let udp = &f[34..42];
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 9000);
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]), 40);
        assert_eq!(&f[42..50], &0x0102u64.to_be_bytes());
        // RFC 1071's example words sum to 0xddf2; the checksum is its complement.
        assert_eq!(
            ipv4_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    #[tokio::test]
    async fn a_flow_reaches_the_other_end_at_its_rate() {
        let dir = tempfile::tempdir().unwrap();
        let qemus = dir.path().join("q.sock");
        let qemu = UnixDatagram::bind(&qemus).unwrap();
        let traffic =
            Traffic::bind(&dir.path().join("l.sock"), &qemus, Addresses::for_index(0)).unwrap();
        let flow = UdpFlow {
            port: 7,
            payload: 64,
            rate: 200.0,
            count: 40,
        };
        let qemu = Arc::new(qemu);
        let reader = tokio::spawn({
            let qemu = qemu.clone();
            async move {
                let mut frame = [0u8; 2048];
                for n in 0..40u64 {
                    let len = qemu.recv(&mut frame).await.unwrap();
                    assert_eq!(len, 14 + 20 + 8 + 64);
                    assert_eq!(&frame[42..50], &n.to_be_bytes());
                }
            }
        });
        let sent = traffic.send_udp(&flow).await.unwrap();
        assert_eq!((sent.frames, sent.dropped), (40, 0));
        // 40 at 200/s: the first at once, the last 195 ms later.
        assert!(sent.elapsed >= Duration::from_millis(190), "{sent:?}");
        reader.await.unwrap();
        // Nobody reading: the queue fills and the rest are dropped at the flow's pace.
        let sent = traffic
            .send_udp(&UdpFlow {
                rate: 1000.0,
                count: 30,
                ..flow
            })
            .await
            .unwrap();
        assert_eq!(sent.frames + sent.dropped, 30);
        assert!(sent.dropped >= 15, "{sent:?}");
        let mut frame = [0u8; 2048];
        while qemu.try_recv(&mut frame).is_ok() {}
        // And back: what the "guest" sends is counted.
        qemu.send_to(b"frame", dir.path().join("l.sock"))
            .await
            .unwrap();
        for _ in 0..100 {
            if traffic.frames_from_guest() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(traffic.frames_from_guest(), 1);
        let err = traffic
            .send_udp(&UdpFlow {
                payload: 2000,
                ..flow
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("at most 1472"), "{err}");
        drop(qemu);
        std::fs::remove_file(&qemus).unwrap();
        let err = format!("{:#}", traffic.send_udp(&flow).await.unwrap_err());
        assert!(err.contains("is QEMU running"), "{err}");
    }
}

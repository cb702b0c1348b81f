//! A layer's download kept to what its manifest declares: no more bytes than its size, no
//! longer than its deadline.

use std::time::Duration;

/// The longest a layer's whole download may take: a minute, plus a second per 256 KiB declared
/// (a slow link's pace), so a registry that drips its bytes cannot hold the entry's lock for
/// ever; the lab then builds instead.
pub(super) fn blob_deadline(declared: u64) -> Duration {
    Duration::from_secs(60 + declared / (256 << 10))
}

/// A writer that refuses more bytes than a blob declared (`FileTooLarge`): a registry cannot fill
/// the disk with a blob longer than its manifest says. By hand: a few lines no crate offers for
/// `AsyncWrite`.
pub(super) struct Capped<W> {
    pub inner: W,
    pub left: u64,
}

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Capped<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if buf.len() as u64 > self.left {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                "more bytes than the blob declared",
            )));
        }
        let written = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &written {
            self.left -= *n as u64;
        }
        written
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn a_blob_longer_than_declared_is_refused_and_a_slow_one_has_a_deadline() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut fits = Capped {
                inner: Vec::new(),
                left: 4,
            };
            fits.write_all(b"abcd").await.unwrap();
            assert_eq!(fits.inner, b"abcd");
            let mut long = Capped {
                inner: Vec::new(),
                left: 4,
            };
            let e = long.write_all(b"abcde").await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
            assert!(
                long.inner.len() <= 4,
                "nothing past the declared size is kept"
            );
        });
        assert_eq!(blob_deadline(0), Duration::from_secs(60));
        assert_eq!(blob_deadline(300 << 20), Duration::from_secs(60 + 1200));
    }
}

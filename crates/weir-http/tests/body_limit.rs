//! How much of an answer's body the client reads: 64 KiB by default (adapters), more when asked
//! (`reading_up_to`, the command line's); a larger body is reported as such, with its status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_http::HttpClient;

/// A server on port 0 that answers every request 200 with `size` bytes of body.
async fn server(size: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 1024];
                while !head.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(&vec![b'x'; size]).await;
            });
        }
    });
    address
}

#[tokio::test]
async fn bodies_over_the_limit_are_reported_and_the_limit_can_be_raised() {
    let address = server(100 * 1024).await;
    let url = format!("http://{address}/");
    let timeout = Duration::from_secs(60);
    let default = HttpClient::default().get(&url, timeout).await.unwrap();
    assert_eq!(default.status, 200);
    assert!(default.oversized);
    assert!(default.body.is_empty());
    let raised = HttpClient::default()
        .reading_up_to(1024 * 1024)
        .get(&url, timeout)
        .await
        .unwrap();
    assert!(!raised.oversized);
    assert_eq!(raised.body.len(), 100 * 1024);
    let small = server(10).await;
    let within = HttpClient::default()
        .get(&format!("http://{small}/"), timeout)
        .await
        .unwrap();
    assert!(!within.oversized);
    assert_eq!(&within.body[..], b"xxxxxxxxxx");
}

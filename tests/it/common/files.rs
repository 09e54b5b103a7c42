//! A stand-in file host and transcription service on 127.0.0.1: serves attachment URLs
//! (a small PNG, a tiny PDF, a 50 MB file announced by its Content-Length) and answers
//! OpenAI's `/audio/transcriptions` (multipart: `model` and `file`) — or fails it with a 500
//! under `/broken`. What each transcription request carried is recorded.

use axum::Router;
use axum::body::Body;
use axum::extract::{Multipart, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::{Arc, Mutex};

/// A 1×1 PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A one-page PDF showing `text` in Helvetica.
pub fn tiny_pdf(text: &str) -> Vec<u8> {
    let stream = format!("BT /F1 18 Tf 10 100 Td ({text}) Tj ET");
    pdf_with_contents(stream.as_bytes(), "")
}

/// A decompression bomb: one page whose Flate-compressed content stream inflates to about
/// `inflated` bytes of text operators (a few hundred KB on the wire for 60 MB).
pub fn bomb_pdf(inflated: usize) -> Vec<u8> {
    use std::io::Write;
    let op = b"BT /F1 12 Tf 10 100 Td (boom boom boom boom) Tj ET\n";
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let mut written = 0;
    let block = op.repeat(4096);
    while written < inflated {
        encoder.write_all(&block).unwrap();
        written += block.len();
    }
    pdf_with_contents(&encoder.finish().unwrap(), "/Filter /FlateDecode ")
}

/// A one-page PDF whose content stream is `stream` (with `filter`, e.g. `/Filter /FlateDecode `).
pub fn pdf_with_contents(stream: &[u8], filter: &str) -> Vec<u8> {
    let objects: [Vec<u8>; 5] = [
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_vec(),
        [
            format!("<< {filter}/Length {} >>\nstream\n", stream.len()).as_bytes(),
            stream,
            b"\nendstream",
        ]
        .concat(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend(object);
        out.extend(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        out.extend(format!("{offset:010} 00000 n \n").as_bytes());
    }
    out.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// One transcription request: its model and the file's name and size.
#[derive(Debug, Clone)]
pub struct Transcription {
    pub model: String,
    pub file_name: String,
    pub bytes: usize,
}

#[derive(Default)]
struct Seen {
    transcriptions: Mutex<Vec<Transcription>>,
}

pub struct FileHost {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    seen: Arc<Seen>,
}

impl FileHost {
    pub async fn start() -> Self {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route(
                "/photo.png",
                get(|| async { ([(header::CONTENT_TYPE, "image/png")], PNG) }),
            )
            .route(
                "/report.pdf",
                get(|| async {
                    (
                        [(header::CONTENT_TYPE, "application/pdf")],
                        tiny_pdf("Quarterly revenue grew by twelve percent"),
                    )
                }),
            )
            .route("/huge.bin", get(huge))
            .route("/v1/audio/transcriptions", post(transcribe))
            .route(
                "/broken/audio/transcriptions",
                post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "down") }),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FileHost { url, seen }
    }

    pub fn transcriptions(&self) -> Vec<Transcription> {
        self.seen.transcriptions.lock().unwrap().clone()
    }
}

/// 50 MB, announced by Content-Length (the body is streamed only if asked for).
async fn huge() -> Response {
    const SIZE: usize = 50 * 1024 * 1024;
    let chunks = futures::stream::iter(
        (0..SIZE / 65_536).map(|_| Ok::<_, std::io::Error>(vec![0u8; 65_536])),
    );
    Response::builder()
        .header(header::CONTENT_LENGTH, SIZE)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from_stream(chunks))
        .unwrap()
}

async fn transcribe(State(seen): State<Arc<Seen>>, mut form: Multipart) -> impl IntoResponse {
    let mut model = String::new();
    let mut file_name = String::new();
    let mut bytes = 0;
    let mut transcript = String::new();
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("model") => model = field.text().await.unwrap_or_default(),
            Some("file") => {
                file_name = field.file_name().unwrap_or_default().to_string();
                let body = field.bytes().await.unwrap_or_default();
                bytes = body.len();
                transcript = String::from_utf8_lossy(&body).into_owned();
            }
            _ => {}
        }
    }
    seen.transcriptions.lock().unwrap().push(Transcription {
        model,
        file_name,
        bytes,
    });
    // The "audio" is its own transcript.
    axum::Json(serde_json::json!({"text": transcript}))
}

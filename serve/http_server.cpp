#include "serve/http_server.hpp"

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <optional>
#include <thread>

namespace kiln {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

// An upgraded connection: frames read one after another, each handed to the handler; frames
// sent from any thread are queued on the strand and written in order.
class ws_connection : public ws_channel, public std::enable_shared_from_this<ws_connection> {
public:
  ws_connection(beast::tcp_stream stream, size_t max_message, std::atomic<int>& open,
                const std::atomic<bool>& stopped)
      : ws_(std::move(stream)), max_message_(max_message), open_(open), stopped_(stopped) {
    ++open_;
  }
  ~ws_connection() override { --open_; }

  void start(http::request<http::string_body> req, const ws_routes& routes, http_request r) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(max_message_);
    auto self = shared_from_this();
    ws_.async_accept(req, [self, &routes, r = std::move(r)](beast::error_code ec) {
      if (ec) return;
      self->handler_ = routes.open(r, self);
      self->read();
    });
  }

  void send(std::string text) override {
    if (stopped_) return; // the io thread is gone: nothing would write it
    asio::post(ws_.get_executor(), [self = shared_from_this(), text = std::move(text)]() mutable {
      self->out_.push_back(std::move(text));
      if (!self->writing_) self->write();
    });
  }

  void close() override {
    if (stopped_) return;
    asio::post(ws_.get_executor(), [self = shared_from_this()] {
      if (self->closing_) return; // Beast allows one close per stream
      self->closing_ = true;
      self->ws_.async_close(websocket::close_code::normal, [self](beast::error_code) {});
    });
  }

private:
  void read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == websocket::error::closed) self->closing_ = true; // the peer's close was answered
      if (ec) return self->closed();
      std::string text = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      if (self->handler_.on_message) self->handler_.on_message(std::move(text));
      self->read();
    });
  }

  void write() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(out_.front()),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      self->out_.pop_front();
                      if (ec || self->out_.empty()) {
                        self->writing_ = false;
                        return;
                      }
                      self->write();
                    });
  }

  // The handler may hold this channel: dropping it here breaks that cycle.
  void closed() {
    auto h = std::move(handler_);
    handler_ = {};
    if (h.on_close) h.on_close();
  }

  websocket::stream<beast::tcp_stream> ws_;
  size_t max_message_;
  std::atomic<int>& open_;
  const std::atomic<bool>& stopped_;
  bool closing_ = false;
  beast::flat_buffer buffer_;
  std::deque<std::string> out_;
  bool writing_ = false;
  ws_handler handler_;
};

// One connection: read a request, hand it to the route, write its answer, read the next
// (keep-alive). The answer may arrive from another thread: it is posted back to the
// connection's strand, so the stream is only ever touched there.
class connection : public std::enable_shared_from_this<connection> {
public:
  connection(tcp::socket s, const http_options& o, const route_fn& route, const ws_routes& ws,
             std::atomic<int>& open, const std::atomic<bool>& stopped)
      : stream_(std::move(s)), opts_(o), route_(route), ws_(ws), open_(open), stopped_(stopped) {
    ++open_;
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~connection() { --open_; }

  void start() { read(); }

  void refuse(int status, const std::string& why) {
    reply(http_response{status, "{\"error\":\"" + why + "\"}", "application/json", {}}, false);
  }

private:
  void read() {
    parser_.emplace();
    parser_->body_limit(opts_.max_body_bytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(std::chrono::seconds(opts_.read_timeout_s));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset)
      return close();
    if (ec == http::error::body_limit) {
      reply(http_response{413,
                          "{\"error\":\"the request body is over the limit of " +
                              std::to_string(opts_.max_body_bytes) + " bytes\"}",
                          "application/json",
                          {}},
            false);
      return;
    }
    if (ec) {
      reply(http_response{400,
                          "{\"error\":\"unreadable HTTP request: " + ec.message() + "\"}",
                          "application/json",
                          {}},
            false);
      return;
    }
    auto req = parser_->release();
    keep_alive_ = req.keep_alive();
    // HEAD is routed as GET and answered with GET's headers and no body.
    head_ = req.method() == http::verb::head;
    http_request r;
    r.method = head_ ? "GET" : std::string(req.method_string());
    r.target = std::string(req.target());
    if (auto it = req.find(http::field::authorization); it != req.end())
      r.authorization = std::string(it->value());
    if (auto it = req.find(http::field::host); it != req.end()) r.host = std::string(it->value());
    if (auto it = req.find(http::field::content_type); it != req.end())
      r.content_type = std::string(it->value());
    r.peer = peer_;
    if (websocket::is_upgrade(req)) {
      auto refused = ws_.check ? ws_.check(r)
                               : std::optional<http_response>(http_response{
                                     404, "{\"detail\":\"Not Found\"}", "application/json", {}});
      if (refused) return reply(std::move(*refused), false);
      stream_.expires_never();
      // The stream moves into the WebSocket connection; this one ends here.
      std::make_shared<ws_connection>(std::move(stream_), opts_.max_body_bytes, open_, stopped_)
          ->start(std::move(req), ws_, std::move(r));
      return;
    }
    r.body = std::move(req.body());
    // Nothing more is read while the answer is pending: one request in flight per connection.
    stream_.expires_never();
    // The first call answers; a respond_fn whose every copy is dropped uncalled (a job dropped
    // by a stop) answers 500 from the guard's destructor, so no client waits forever.
    struct guard {
      std::shared_ptr<connection> self;
      std::atomic<bool> answered{false};
      void send(http_response out) {
        if (answered.exchange(true) || self->stopped_) return;
        asio::post(self->stream_.get_executor(),
                   [c = self, out = std::move(out)]() mutable { c->reply(std::move(out), true); });
      }
      ~guard() {
        send(http_response{500,
                           "{\"detail\":\"the request was dropped: the server is stopping\"}",
                           "application/json",
                           {}});
      }
    };
    auto g = std::make_shared<guard>();
    g->self = shared_from_this();
    respond_fn respond = [g](http_response out) { g->send(std::move(out)); };
    try {
      route_(std::move(r), respond);
    } catch (const std::exception& e) {
      respond(http_response{500, "{\"error\":\"internal error\"}", "application/json", {}});
    }
  }

  void reply(http_response out, bool may_keep) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(out.status));
    res->set(http::field::server, "kiln-serve");
    res->set(http::field::content_type, out.content_type);
    for (const auto& [k, v] : out.headers) res->set(k, v);
    bool keep = may_keep && keep_alive_;
    res->keep_alive(keep);
    if (head_) {
      res->content_length(out.body.size());
    } else {
      res->body() = std::move(out.body);
      res->prepare_payload();
    }
    head_ = false;
    stream_.expires_after(std::chrono::seconds(opts_.read_timeout_s));
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res, keep](beast::error_code ec, size_t) {
                        if (ec) return self->close();
                        if (!keep) return self->linger();
                        self->read();
                      });
  }

  // After an answer that ends the connection (413, 400, Connection: close): what the client is
  // still sending is read and dropped for a while before the socket closes, since closing with
  // unread data resets the connection and the client may lose the answer it was sent.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain_ = std::make_shared<std::array<char, 16384>>();
    drain_some(size_t{64} << 20);
  }
  void drain_some(size_t left) {
    stream_.async_read_some(asio::buffer(*drain_),
                            [self = shared_from_this(), left](beast::error_code ec, size_t n) {
                              if (ec || n >= left) return self->close();
                              self->drain_some(left - n);
                            });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bool head_ = false;
  std::shared_ptr<std::array<char, 16384>> drain_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const http_options& opts_;
  const route_fn& route_;
  const ws_routes& ws_;
  std::atomic<int>& open_;
  const std::atomic<bool>& stopped_;
  std::string peer_;
  bool keep_alive_ = false;
};

} // namespace

struct http_server::impl {
  http_options opts;
  route_fn route;
  ws_routes ws;
  // Before the io context: its handlers, destroyed with it, end connections that use these.
  std::atomic<int> open{0};
  std::atomic<bool> stopped{false};
  uint16_t port = 0;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer pause{io};
  std::thread thread;

  void accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (or the like): try again shortly rather than spin.
        pause.expires_after(std::chrono::milliseconds(100));
        pause.async_wait([this](beast::error_code e) {
          if (!e) accept();
        });
        return;
      }
      auto c = std::make_shared<connection>(std::move(s), opts, route, ws, open, stopped);
      if (open.load() > opts.max_connections)
        c->refuse(503, "too many open connections");
      else
        c->start();
      accept();
    });
  }
};

http_server::http_server(std::unique_ptr<impl> p) : p_(std::move(p)) {}

expected<std::unique_ptr<http_server>> http_server::start(const http_options& opts, route_fn route,
                                                          ws_routes ws) {
  auto p = std::make_unique<impl>();
  p->opts = opts;
  p->route = std::move(route);
  p->ws = std::move(ws);
  beast::error_code ec;
  auto addr = asio::ip::make_address(opts.bind, ec);
  if (ec) return error{"serve: '" + opts.bind + "' is not an IP address"};
  tcp::endpoint ep{addr, opts.port};
  std::string where = opts.bind + ":" + std::to_string(opts.port);
  p->acceptor.open(ep.protocol(), ec);
  if (!ec) p->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) p->acceptor.bind(ep, ec);
  if (!ec) p->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return error{"serve: cannot listen on " + where + ": " + ec.message()};
  p->port = p->acceptor.local_endpoint().port();
  p->accept();
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

void http_server::stop() {
  if (p_->stopped.exchange(true)) return;
  p_->io.stop();
  if (p_->thread.joinable()) p_->thread.join();
  beast::error_code ec;
  p_->acceptor.close(ec);
}

http_server::~http_server() { stop(); }

uint16_t http_server::port() const { return p_->port; }

} // namespace kiln

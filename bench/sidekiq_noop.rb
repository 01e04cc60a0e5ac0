# The Sidekiq side of bench/throughput.sh: the no-op jobs `Noop` and `PickupProbe`, and two server middlewares.
# - `PickupProbe` jobs (args: [folder]) record their pickup latency (now - enqueued_at, seconds) as one line
#   appended to `<folder>/pickup.<pid>`, one write per job, just before perform; our `PickupProbe` job
#   (Sources/BenchJobs/PickupProbeJob.swift) does the same at the start of its perform, so both sides give exact
#   samples read by the same script (bench/percentiles.py).
# - With BENCH_DONE=1 one counts finished jobs in memory and a thread adds them to bench:done every 5 ms
#   (Sidekiq's own stat:processed is flushed only every 5 s), so the drain clock stops when every job is done at
#   about one write per 5 ms per process instead of one per job.
require "sidekiq"
# redis-rb 4.8 warns on every BRPOP Sidekiq 6.4.1 makes; silence it so logging does not slow Sidekiq down.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.logger.level = Logger::WARN

class PickupRecorder
  @lock = Mutex.new
  @files = {}
  class << self
    def record(folder, seconds)
      line = format("%.6f\n", seconds)
      @lock.synchronize do
        file = (@files[folder] ||= File.open("#{folder}/pickup.#{Process.pid}", "a").tap { |f| f.sync = true })
        file.write(line)
      end
    end
  end

  def call(_worker, job, _queue)
    if job["enqueued_at"] && (folder = { "PickupProbe" => 0, "HttpProbe" => 1 }[job["class"]])
      PickupRecorder.record(job["args"][folder], Time.now.to_f - job["enqueued_at"].to_f)
    end
    yield
  end
end

Sidekiq.configure_server do |config|
  config.server_middleware { |chain| chain.add PickupRecorder }
end

class DoneCounter
  @lock = Mutex.new
  @count = 0
  class << self
    def add
      @lock.synchronize { @count += 1 }
    end

    def take
      @lock.synchronize { n = @count; @count = 0; n }
    end
  end

  def call(_worker, _job, _queue)
    yield
    DoneCounter.add
  end
end

if ENV["BENCH_DONE"] == "1"
  Sidekiq.configure_server do |config|
    config.server_middleware { |chain| chain.add DoneCounter }
    config.on(:startup) do
      Thread.new do
        loop do
          sleep 0.005
          n = DoneCounter.take
          Sidekiq.redis { |c| c.incrby("bench:done", n) } if n > 0
        end
      end
    end
  end
end

class Noop
  include Sidekiq::Worker
  def perform(*) end
end

class PickupProbe
  include Sidekiq::Worker
  def perform(*) end
end

# bench/http-bound.sh: one GET to args[0] (bench/slow_http.c) on a keep-alive connection of the thread's own, as our
# HttpProbe does through libcurl's connection cache; a status other than 200 fails the job.
require "net/http"
class HttpProbe
  include Sidekiq::Worker
  def perform(url, _folder)
    uri = URI(url)
    http = (Thread.current[:bench_http] ||= Net::HTTP.start(uri.host, uri.port))
    response = http.get(uri.request_uri)
    raise "HTTP #{response.code}" unless response.code == "200"
  end
end

# With BENCH_RELIABLE=1 (bench/redis-cpu.sh): gitlab-sidekiq-fetcher's ReliableFetch (Debian's
# ruby-gitlab-sidekiq-fetcher 0.8: a working list per process, the job LREM'd on acknowledgement) instead of
# Sidekiq's BasicFetch, so Sidekiq is measured with the guarantee ours gives.
if ENV["BENCH_RELIABLE"] == "1"
  require "sidekiq-reliable-fetch"
  Sidekiq.configure_server { |config| Sidekiq::ReliableFetch.setup_reliable_fetch!(config) }
end

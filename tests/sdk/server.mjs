// Starts `deepinfer serve` on a free port for the SDK and load tests, and reads its state back
// (/metrics gauges, resident memory). The binary comes from $DEEPINFER (CTest sets it).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../..');
// Random weights with the full 129,280-id vocabulary, so chat markers encode.
export const modelDir = path.join(process.env.DEEPINFER_TEST_DATA_DIR ?? path.join(repoRoot, 'tests/data'),
                                  'golden/v4/real_vocab');
export const modelName = 'tiny';

// Exits 77 (CTest's skip code for these tests) when the npm packages are not installed.
export async function requirePackages(...names) {
  for (const name of names) {
    try {
      await import(name);
    } catch {
      console.log(`SKIP: npm package '${name}' is missing: run scripts/setup.sh (npm ci) first`);
      process.exit(77);
    }
  }
}

// `model` and `name` default to the random-weights test model; the embedded-model test passes its own.
export async function startServer(extraArgs = [], extraEnv = {}, { model = modelDir, name = modelName } = {}) {
  const binary = process.env.DEEPINFER ?? path.join(repoRoot, 'build/deepinfer');
  // DEEPINFER_SERVE_ARGS (e.g. "--data-parallel 2") runs a test against another server set-up.
  const setup = (process.env.DEEPINFER_SERVE_ARGS ?? '').split(/\s+/).filter(Boolean);
  const args = ['serve', '--model', model, '--served-model-name', name, '--port', '0',
                '--cache-memory', '64M', '--threads', '2', ...setup, ...extraArgs];
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...extraEnv } });
  let stderr = '';
  child.stderr.on('data', (data) => { stderr += data; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`no startup line in 30 s; stderr: ${stderr}`)), 30000);
    child.stdout.on('data', (data) => {
      stdout += data;
      const match = stdout.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    exited.then(({ code }) => reject(new Error(`server exited with ${code} before listening: ${stderr}`)));
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  for (let i = 0; ; ++i) {
    try {
      if ((await fetch(`${baseUrl}/health`)).ok) break;
    } catch (error) {
      if (i > 200) throw error;
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    port,
    baseUrl,
    pid: child.pid,
    stderr: () => stderr,
    // SIGTERM: running requests finish, then the process exits; resolves to its exit code.
    async stop() {
      child.kill('SIGTERM');
      const { code, signal } = await exited;
      return signal ? `signal ${signal}` : code;
    },
  };
}

// The value of a gauge or counter with no label but the model's; summed over the engine ranks
// (engine="i") of a data-parallel server.
export async function metric(baseUrl, name) {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const pattern = new RegExp(`^${name}\\{model_name="${modelName}"(?:,engine="\\d+")?\\} (\\S+)$`, 'gm');
  const values = [...text.matchAll(pattern)].map((match) => Number(match[1]));
  if (values.length === 0) throw new Error(`/metrics has no ${name}`);
  return values.reduce((a, b) => a + b, 0);
}

// Polls until every gauge in `expected` has its value; returns the last values read.
export async function waitForMetrics(baseUrl, expected, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const seen = {};
    for (const name of Object.keys(expected)) seen[name] = await metric(baseUrl, name);
    if (Object.keys(expected).every((name) => seen[name] === expected[name]) || Date.now() > deadline) return seen;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function residentBytes(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(status.match(/^VmRSS:\s+(\d+) kB$/m)[1]) * 1024;
}

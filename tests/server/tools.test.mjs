// tests/server/tools.test.mjs — tool calls through a real socket (server/tool_calls.h, docs/chat.md#tools) on the
// random test model with Qwen3's template (hermes): tool_choice required and named enforced by a grammar, whose calls
// validate against the functions' schemas, whole and streamed, the deltas joining to the message; parallel_tool_calls
// false; tool_choice none (no tools rendered, nothing parsed); auto parsing a call forced by guided_regex, and invalid
// arguments returned as written and counted on /metrics; a tool result turn; the 400s; logprobs over the call's tokens;
// the three formats on the trained demo model too. Run by tests/test_tools.sh.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { MODEL, metrics, request, sseEvents, startServer } from './lib.mjs';

const post = (srv, body) => request(srv.port, 'POST', '/v1/chat/completions', body);
const Q = [{ role: 'user', content: 'What is the weather in Paris?' }];
// Schemas tight enough that the random model's calls end well inside max_tokens.
const WEATHER = { type: 'function', function: { name: 'get_weather', description: 'Current weather',
  parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'],
    additionalProperties: false } } };
const ADD = { type: 'function', function: { name: 'add',
  parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 }, b: { type: 'boolean' } },
    required: ['a', 'b'], additionalProperties: false } } };
const TOOLS = [WEATHER, ADD];
const BASE = { messages: Q, tools: TOOLS, seed: 7, temperature: 0, max_tokens: 300 };

// The arguments against the function's schema, checked by hand (the schemas above are flat).
function validArguments(call) {
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args, 'object');
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city']);
    assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'add');
    assert.deepEqual(Object.keys(args).sort(), ['a', 'b']);
    assert.ok(Number.isInteger(args.a) && args.a >= 0 && args.a <= 9, call.function.arguments);
    assert.equal(typeof args.b, 'boolean');
  }
}

// Every call's arguments against its function's parameters schema, judged by Debian's python3-jsonschema
// (tests/structured_validate.py), which shares no code with the grammar that constrained them.
function schemaValid(calls) {
  const cases = calls.map((call, i) => ({ name: `${call.function.name} #${i}`, kind: 'schema',
    spec: TOOLS.find((t) => t.function.name === call.function.name).function.parameters,
    outputs: [call.function.arguments] }));
  const r = JSON.parse(execFileSync('/usr/bin/python3', ['tests/structured_validate.py'],
    { input: JSON.stringify(cases) }).toString('utf8'));
  assert.equal(r.checked, calls.length);
  assert.deepEqual(r.failures, []);
}

// A stream's deltas joined as OpenAI's SDKs join them: content concatenated, tool_calls merged by index (the first
// entry of a call carries id, type, name and empty arguments; later ones only arguments).
function joinChat(events) {
  let content = null, finish = null;
  const calls = [];
  for (const e of events) {
    if (e === '[DONE]' || !e.choices.length) continue;
    const c = e.choices[0];
    if (c.finish_reason) finish = c.finish_reason;
    const d = c.delta;
    if (d.content) content = (content ?? '') + d.content;
    for (const t of d.tool_calls ?? []) {
      if (t.id !== undefined) {
        assert.equal(calls.length, t.index, 'a new call has the next index');
        assert.equal(t.type, 'function');
        assert.equal(t.function.arguments, '');
        calls.push({ id: t.id, type: t.type, function: { name: t.function.name, arguments: '' } });
      } else {
        assert.ok(calls[t.index], `arguments of call ${t.index} before its name`);
        assert.equal(t.function.name, undefined);
        calls[t.index].function.arguments += t.function.arguments;
      }
    }
  }
  const message = { role: 'assistant', content };
  if (calls.length) message.tool_calls = calls;
  return { message, finish };
}

// The same request whole and streamed: the joined deltas equal the message byte for byte.
async function both(srv, body) {
  const whole = await post(srv, body);
  assert.equal(whole.status, 200, whole.text);
  const streamed = await post(srv, { ...body, stream: true });
  assert.equal(streamed.status, 200, streamed.text);
  const events = sseEvents(streamed.text);
  for (const e of events)
    if (e !== '[DONE]' && e.choices.length)
      for (const t of e.choices[0].delta.tool_calls ?? [])
        assert.ok(!/<tool_call>|<\/tool_call>/.test(JSON.stringify(e.choices[0].delta.content ?? '')));
  const joined = joinChat(events);
  const c = whole.json.choices[0];
  assert.deepEqual(joined.message, c.message);
  assert.equal(joined.finish, c.finish_reason);
  return c;
}

describe('tools with Qwen3\'s template (tool_call_parser auto → hermes)', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', '1024', '--chat-template', 'tests/data/chat/qwen3.jinja']);
  });
  after(async () => {
    if (srv) await srv.stop();
  });

  test('the parser is hermes, from the template', () => {
    assert.match(srv.log(), /tool-call parser: hermes \(tool_call_parser = auto\)/);
  });

  test('tool_choice required, parallel_tool_calls false: one valid call, finish_reason tool_calls', async () => {
    const c = await both(srv, { ...BASE, tool_choice: 'required', parallel_tool_calls: false });
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    assert.match(c.message.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(c.message.tool_calls[0].type, 'function');
    validArguments(c.message.tool_calls[0]);
  });

  test('logprobs cover the tool-call tokens, as OpenAI\'s do; streamed they are the same entries', async () => {
    const body = { ...BASE, tool_choice: 'required', parallel_tool_calls: false, logprobs: true, top_logprobs: 2 };
    const whole = await post(srv, body);
    assert.equal(whole.status, 200, whole.text);
    const c = whole.json.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    const lps = c.logprobs.content;
    // the grammar ended the call: no end token was drawn, so every generated token has its entry
    assert.equal(lps.length, whole.json.usage.completion_tokens);
    for (const e of lps) {
      assert.ok(e.logprob <= 0 && e.top_logprobs.length === 2, JSON.stringify(e));
      assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
    }
    // the tokens spell the call as the model wrote it: the tags and the arguments the message carries
    const raw = lps.map((e) => e.token).join('');
    assert.match(raw, /^<tool_call>[\s\S]*<\/tool_call>$/);
    assert.ok(raw.includes(c.message.tool_calls[0].function.arguments), raw);
    assert.ok(raw.includes(c.message.tool_calls[0].function.name), raw);
    const streamed = await post(srv, { ...body, stream: true });
    const got = sseEvents(streamed.text).filter((e) => e !== '[DONE]' && e.choices.length)
      .flatMap((e) => e.choices[0].logprobs?.content ?? []);
    assert.deepEqual(got, lps);
  });

  test('a named function: every call is to it, with valid arguments', async () => {
    for (const [name, parallel] of [['get_weather', false], ['add', false], ['get_weather', true]]) {
      const c = await both(srv, { ...BASE, tool_choice: { type: 'function', function: { name } },
        parallel_tool_calls: parallel });
      assert.ok(c.message.tool_calls.length >= 1);
      if (!parallel) {
        assert.equal(c.finish_reason, 'tool_calls');
        assert.equal(c.message.tool_calls.length, 1);
      }
      const ids = new Set();
      for (const call of c.message.tool_calls) {
        assert.equal(call.function.name, name);
        ids.add(call.id);
      }
      assert.equal(ids.size, c.message.tool_calls.length, 'ids are distinct');
      // the last call may be cut short by max_tokens when the model goes on calling; the others are whole
      const whole = c.finish_reason === 'length' ? c.message.tool_calls.slice(0, -1) : c.message.tool_calls;
      assert.ok(whole.length >= 1);
      whole.forEach(validArguments);
    }
  });

  test('tool_choice none: the tools are not rendered and a call stays content', async () => {
    const call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": true}}\n</tool_call>';
    const regex = call.replace(/[{}]/g, '\\$&');
    const none = await both(srv, { ...BASE, tool_choice: 'none', guided_regex: regex });
    assert.equal(none.message.content, call);
    assert.equal(none.message.tool_calls, undefined);
    assert.equal(none.finish_reason, 'stop');
    const plain = await post(srv, { messages: Q, max_tokens: 1 });
    const hidden = await post(srv, { messages: Q, tools: TOOLS, tool_choice: 'none', max_tokens: 1 });
    const shown = await post(srv, { messages: Q, tools: TOOLS, max_tokens: 1 });
    assert.equal(hidden.json.usage.prompt_tokens, plain.json.usage.prompt_tokens);
    assert.ok(shown.json.usage.prompt_tokens > plain.json.usage.prompt_tokens + 50);
    // auto: the same text is a call
    const auto = await both(srv, { ...BASE, guided_regex: `Let me add\\.\n${regex}` });
    assert.equal(auto.message.content, 'Let me add.');
    assert.equal(auto.finish_reason, 'tool_calls');
    assert.equal(auto.message.tool_calls.length, 1);
    assert.equal(auto.message.tool_calls[0].function.name, 'add');
    assert.equal(auto.message.tool_calls[0].function.arguments, '{"a": 1, "b": true}');
  });

  test('auto: parallel_tool_calls false returns the first of two calls', async () => {
    const one = (n) => `<tool_call>\n{"name": "add", "arguments": {"a": ${n}, "b": true}}\n</tool_call>`;
    const regex = `${one(1)}\n${one(2)}`.replace(/[{}]/g, '\\$&');
    const two = await both(srv, { ...BASE, guided_regex: regex });
    assert.deepEqual(two.message.tool_calls.map((t) => t.function.arguments), ['{"a": 1, "b": true}', '{"a": 2, "b": true}']);
    const first = await both(srv, { ...BASE, guided_regex: regex, parallel_tool_calls: false });
    assert.deepEqual(first.message.tool_calls.map((t) => t.function.arguments), ['{"a": 1, "b": true}']);
    assert.equal(first.finish_reason, 'tool_calls');
  });

  test('auto: invalid arguments are returned as written and counted', async () => {
    const before = await metrics(srv.port);
    const call = '<tool_call>\n{"name": "add", "arguments": {"a": }}\n</tool_call>';
    const c = await both(srv, { ...BASE, guided_regex: call.replace(/[{}]/g, '\\$&') });
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.arguments, '{"a": }');
    const m = await metrics(srv.port);
    // both (whole and streamed) count: two calls, both invalid
    assert.equal(m.get('aahd_tool_calls_total') - before.get('aahd_tool_calls_total'), 2);
    assert.equal(m.get('aahd_tool_call_invalid_arguments_total') - before.get('aahd_tool_call_invalid_arguments_total'), 2);
    assert.ok(m.get('aahd_constrained_requests_total{kind="tool_call"}') >= 1);
  });

  test('a tool result turn renders and is answered; an assistant turn of only tool_calls may have content null', async () => {
    const r = await post(srv, { messages: [...Q,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' }],
    tools: TOOLS, max_tokens: 8, seed: 1 });
    assert.equal(r.status, 200, r.text);
    const again = await post(srv, { messages: Q, tools: TOOLS, max_tokens: 1 });
    assert.ok(r.json.usage.prompt_tokens > again.json.usage.prompt_tokens, 'the call and its result are in the prompt');
  });

  test('refusals', async () => {
    const cases = [
      [{ ...BASE, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /not among 'tools'/],
      [{ ...BASE, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', /cannot be combined/],
      [{ ...BASE, tool_choice: 'required', guided_regex: 'a' }, 'tool_choice', /cannot be combined/],
      [{ ...BASE, tools: [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }] }, 'tools',
        /cannot be enforced/],
      [{ ...BASE, tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f',
        parameters: { type: 'object', properties: { x: { type: 'string', format: 'nonsense-format' } } } } }] },
      'tools', /./],
      [{ ...BASE, tools: undefined, tool_choice: 'required' }, 'tool_choice', /needs 'tools'/],
      [{ ...BASE, parallel_tool_calls: 'no' }, 'parallel_tool_calls', /true or false/],
    ];
    for (const [body, param, says] of cases) {
      const r = await post(srv, body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 200)}: ${r.text}`);
      assert.equal(r.json.error.param, param, r.text);
      assert.match(r.json.error.message, says);
    }
    // strict is enforced where the grammar constrains the call: accepted there
    const strict = await post(srv, { ...BASE, parallel_tool_calls: false, tool_choice: 'required',
      tools: [{ ...WEATHER, function: { ...WEATHER.function, strict: true } }] });
    assert.equal(strict.status, 200, strict.text);
    validArguments(strict.json.choices[0].message.tool_calls[0]);
  });
});

describe('tool_call_parser none', () => {
  let srv;
  before(async () => {
    srv = await startServer(['--ctx-len', '1024', '--chat-template', 'tests/data/chat/qwen3.jinja',
      '--tool-call-parser', 'none']);
  });
  after(async () => {
    if (srv) await srv.stop();
  });

  test('auto leaves a call in content; required is refused', async () => {
    const call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": true}}\n</tool_call>';
    const c = await both(srv, { ...BASE, guided_regex: call.replace(/[{}]/g, '\\$&') });
    assert.equal(c.message.content, call);
    assert.equal(c.finish_reason, 'stop');
    const r = await post(srv, { ...BASE, tool_choice: 'required' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'tool_choice');
    assert.match(r.json.error.message, /tool_call_parser = none/);
  });
});

// Llama 3.1's and Mistral's templates: auto picks their formats; required and named are enforced by the grammar, which
// spells the markers in ordinary tokens (it never allows a special token), and the parser reads that spelling.
for (const [template, format, idPattern] of [['llama3.1_json', 'llama3_json', /^call_[A-Za-z0-9]{24}$/],
  ['mistral', 'mistral', /^[A-Za-z0-9]{9}$/], ['qwen3', 'hermes', /^call_[A-Za-z0-9]{24}$/]]) {
  describe(`tools with ${template}.jinja (tool_call_parser auto → ${format})`, () => {
    let srv;
    before(async () => {
      srv = await startServer(['--ctx-len', '1024', '--chat-template', `tests/data/chat/${template}.jinja`]);
    });
    after(async () => {
      if (srv) await srv.stop();
    });

    test('the parser comes from the template', () => {
      assert.match(srv.log(), new RegExp(`tool-call parser: ${format} \\(tool_call_parser = auto\\)`));
    });

    test('required and named, whole and streamed: calls whose arguments validate against the schema', async () => {
      for (const [choice, parallel] of [['required', false], ['required', true], ['get_weather', false],
        ['add', false], ['add', true]]) {
        const tool_choice = choice === 'required' ? choice : { type: 'function', function: { name: choice } };
        const c = await both(srv, { ...BASE, tool_choice, parallel_tool_calls: parallel });
        const calls = c.message.tool_calls;
        assert.ok(calls && calls.length >= 1, JSON.stringify(c));
        assert.equal(c.message.content, null, JSON.stringify(c));
        if (!parallel) assert.equal(calls.length, 1);
        for (const call of calls) {
          assert.match(call.id, idPattern);
          if (choice !== 'required') assert.equal(call.function.name, choice);
        }
        // the last call may be cut short by max_tokens when the model goes on calling; the others are whole
        const whole = c.finish_reason === 'length' ? calls.slice(0, -1) : calls;
        if (c.finish_reason !== 'length') assert.equal(c.finish_reason, 'tool_calls');
        schemaValid(whole);
      }
    });
  });
}

// The markers as special tokens: the test tokenizer given <|python_tag|>, [TOOL_CALLS], [ARGS] and [CALL_ID] as
// special added tokens (ids the model has rows for, past the tokenizer's 2051), and logit_bias to make the random
// model write them. The text pipeline skips special tokens; the parser must see them all the same.
describe('marker special tokens reach the parser', () => {
  const MARKS = { '<|python_tag|>': 2051, '[TOOL_CALLS]': 2052, '[ARGS]': 2053, '[CALL_ID]': 2054 };
  let dir;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aah-markers-'));
    for (const f of ['config.json', 'model.safetensors', 'tokenizer_config.json'])
      fs.symlinkSync(path.resolve(MODEL, f), path.join(dir, f));
    const tj = JSON.parse(fs.readFileSync(path.join(MODEL, 'tokenizer.json'), 'utf8'));
    for (const [content, id] of Object.entries(MARKS))
      tj.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
        special: true });
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tj));
  });
  after(() => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  for (const [template, marker] of [['llama3.1_json', '<|python_tag|>'], ['mistral', '[TOOL_CALLS]']]) {
    test(`${template}: ${marker} written as its special token`, async () => {
      const srv = await startServer(['--ctx-len', '1024', '--chat-template', `tests/data/chat/${template}.jinja`],
        {}, dir);
      try {
        const body = { ...BASE, max_tokens: 2, logit_bias: { [MARKS[marker]]: 100 } };
        // without tools the special token is not text: nothing shows
        const plain = await post(srv, { ...body, tools: undefined });
        assert.equal(plain.json.choices[0].message.content, '', plain.text);
        // with tools the parser reads it: two markers and nothing after them is no call (no name), so the text the
        // parser read comes back as content, as an unparsable call does
        const c = await both(srv, body);
        assert.equal(c.message.tool_calls, undefined);
        assert.equal(c.message.content, marker + marker, JSON.stringify(c));
        assert.equal(c.finish_reason, 'length');
      } finally {
        await srv.stop();
      }
    });
  }
});

// The trained demo model (runs/aah imported by aah-convert; 256 tokens of context, so ChatML renders the turns and
// the parser is named), in each of the three formats: required and named, whole and streamed, calls whose arguments
// validate against the schema.
describe('tools on the trained demo model, each format', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-tools-demo-'));
  before(() => {
    execFileSync(`${process.env.AAH_BUILD || 'build'}/aah-convert`, ['import', '-q', 'runs/aah', path.join(tmp, 'aah')],
      { stdio: 'pipe' });
  });
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));

  for (const format of ['hermes', 'llama3_json', 'mistral']) {
    test(`${format}: required and named, whole and streamed`, async () => {
      const srv = await startServer(['--chat-template', 'tests/data/chat/chatml.jinja', '--tool-call-parser', format],
        {}, path.join(tmp, 'aah', 'checkpoint-10000'));
      try {
        for (const choice of ['required', 'add', 'get_weather']) {
          const tool_choice = choice === 'required' ? choice : { type: 'function', function: { name: choice } };
          const c = await both(srv, { ...BASE, max_tokens: 120, tool_choice, parallel_tool_calls: false });
          assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
          assert.equal(c.message.content, null);
          assert.equal(c.message.tool_calls.length, 1);
          if (choice !== 'required') assert.equal(c.message.tool_calls[0].function.name, choice);
          schemaValid(c.message.tool_calls);
        }
      } finally {
        const r = await srv.stop();
        assert.equal(r.code, 0, srv.log());
      }
    });
  }
});

const vm = require("vm");

function run(userCode) {
  const sandbox = { result: null };
  vm.runInNewContext(userCode, sandbox); // want: code-eval
  return sandbox.result;
}

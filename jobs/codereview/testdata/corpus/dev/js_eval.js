function calculate(req, res) {
  const result = eval(req.body.expression); // want: code-eval
  res.send(String(result));
}

function makeGetter(field) {
  return new Function("obj", "return obj." + field); // want: code-eval
}

function later(name) {
  setTimeout("notify('" + name + "')", 1000); // want: code-eval
}

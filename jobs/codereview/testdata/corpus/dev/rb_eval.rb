class Calculator
  def compute(params)
    eval(params[:expression]) # want: code-eval
  end

  def define(name, body)
    self.class.class_eval("def #{name}; #{body}; end") # want: code-eval
  end
end

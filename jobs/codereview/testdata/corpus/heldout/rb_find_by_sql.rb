class Lookup
  def by_email(email)
    User.find_by_sql("SELECT * FROM users WHERE email = '#{email}'") # want: sql-injection
  end

  def sorted(params)
    User.order(params[:sort]) # want: sql-injection
  end
end
